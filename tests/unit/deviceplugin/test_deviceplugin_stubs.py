"""The checked-in gRPC stubs are exactly what the generator writes from api.proto."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_deviceplugin import generate_stubs

pytestmark = pytest.mark.timeout(60)


def test_checked_in_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    written = generate_stubs.generate(tmp_path)
    package = Path(generate_stubs.__file__).parent
    assert [path.name for path in written] == list(generate_stubs.OUTPUTS)
    for path in written:
        assert (package / path.name).read_text() == path.read_text(), (
            f"{path.name} drifted; run: python -m tpfabric_deviceplugin.generate_stubs"
        )


def test_proto_keeps_the_kubernetes_license_and_package() -> None:
    text = generate_stubs.PROTO.read_text()
    assert "Copyright The Kubernetes Authors." in text
    assert "Apache License, Version 2.0" in text
    assert "package v1beta1;" in text
