"""``tpfabric crds generate --check``: the drift check CI runs on every generated file."""

from __future__ import annotations

from pathlib import Path

from cli_runner import tpfabric


def test_check_fails_on_missing_or_stale_files_and_passes_once_they_are_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "crds"
    missing = tpfabric("crds", "generate", "--out", out, "--check")
    assert missing.exit_code == 1
    assert "is stale: run `tpfabric crds generate`" in missing.stderr
    assert not out.exists(), "a check writes nothing"

    assert tpfabric("crds", "generate", "--out", out).exit_code == 0
    written = sorted(out.iterdir())
    assert written, "the CRDs are written into a folder it makes"
    assert tpfabric("crds", "generate", "--out", out, "--check").exit_code == 0

    written[0].write_text(written[0].read_text() + "# edited by hand\n")
    stale = tpfabric("crds", "generate", "--out", out, "--check")
    assert stale.exit_code == 1
    assert f"{written[0]} is stale" in stale.stderr.replace("\n", "")
