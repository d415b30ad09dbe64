"""`make demo`, the README's first command, runs as a user runs it: `tpfabric demo` on a fresh
local control plane places every example job, shows the contrast and draws the pictures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def test_the_demo_places_every_example_job_and_draws_its_pictures(tmp_path: Path) -> None:
    env = {**os.environ, "TPFABRIC_STATE": str(tmp_path / "state"), "COLUMNS": "200"}
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "tpfabric_cli", "demo", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for path in sorted(EXAMPLES.glob("*.yaml")):
        manifest = yaml.safe_load(path.read_text())
        name, workers = manifest["metadata"]["name"], manifest["spec"]["workers"]
        assert f"TensorParallelJob {name}: Running {workers}/{workers}" in run.stdout, name
    assert "The default scheduler, 5 rounds on this load" in run.stdout
    for picture in ("demo-fabric.png", "demo-placement.png"):
        assert (out / picture).stat().st_size > 0
