"""Bad input on the command line: one clear line and a documented exit code, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tpfabric_cli.errors import EXIT_INPUT
from tpfabric_cli.main import app

runner = CliRunner()


def test_a_malformed_fabric_file_names_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "fabric.yaml"
    bad.write_text("name: x\nrails: many\nblocks: []\n")
    result = runner.invoke(app, ["cluster", "up", "--fabric", str(bad), "--name", "t"])
    assert result.exit_code == EXIT_INPUT
    assert f"error: {bad}: rails:" in result.output
    assert "Traceback" not in result.output


def test_a_missing_fabric_file_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["cluster", "up", "--fabric", str(tmp_path / "nope.yaml")])
    assert result.exit_code == EXIT_INPUT
    assert "cannot read fabric file" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_missing_binary_gives_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    monkeypatch.setenv("TPFABRIC_CACHE", str(tmp_path))
    monkeypatch.setenv("TPFABRIC_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", str(tmp_path))
    result = runner.invoke(app, ["cluster", "up", "--name", "t"])
    assert result.exit_code == EXIT_INPUT
    assert "not found: run `make toolchain`" in result.output
    assert "Traceback" not in result.output


def test_brackets_in_an_error_message_are_printed_not_swallowed(tmp_path: Path) -> None:
    bad = tmp_path / "fabric.yaml"
    leaves = '[{name: l, nodes: ["n[3-1]"]}]'
    bad.write_text(f"name: x\nblocks:\n- name: b\n  spines: [{{name: s, leaves: {leaves}}}]\n")
    result = runner.invoke(app, ["cluster", "up", "--fabric", str(bad), "--name", "t"])
    assert result.exit_code == EXIT_INPUT
    assert "'n[3-1]'" in result.output
