"""Run the ``tpfabric`` command in-process, stdout and stderr kept apart; paths of test data."""

from __future__ import annotations

from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from tpfabric_cli.main import app

TOPOGRAPH = Path(__file__).parents[1] / "fabric" / "data" / "topograph"
EXAMPLES = Path(__file__).parents[3] / "examples" / "fabrics"


def tpfabric(*args: str | Path) -> Result:
    """Return the result of ``tpfabric ARGS`` run in-process."""
    return CliRunner().invoke(app, [str(a) for a in args])
