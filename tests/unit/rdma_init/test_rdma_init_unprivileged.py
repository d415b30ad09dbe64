"""The init program as the wiring runs it: uid 65532, no capability at all, no new privileges
(``INIT_SECURITY_CONTEXT``, Pod Security ``restricted``). It still reads the host's sysfs and
writes the shared volume (an emptyDir: mode 0777) in a form the main container of any user reads.

The program runs in a process of its own under ``setpriv`` with the system's Python (the program
is standard library only), so the test needs root; it is skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rdma_host_builder import dgx_h100, make_nccl_wheel

from tpfabric_core.pod_wiring import INIT_SECURITY_CONTEXT

RDMA_INIT_SOURCES = Path(__file__).resolve().parents[3] / "rdma_init"
SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.fixture
def world_readable() -> Iterator[Path]:
    """Return a folder every user may read (pytest's tmp_path is the caller's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="tpfabric-rdma-init-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def as_the_init_container(argv: list[str], env: dict[str, str]) -> list[str]:
    """Return ``argv`` run as the wiring's user, with no capability and no new privileges."""
    uid, gid = INIT_SECURITY_CONTEXT["runAsUser"], INIT_SECURITY_CONTEXT["runAsGroup"]
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "env",
        "-i",
        *(f"{k}={v}" for k, v in env.items()),
        *argv,
    ]


def test_the_init_program_works_as_a_non_root_user_without_capabilities(
    world_readable: Path,
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running as another uid without capabilities needs root and setpriv")
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"{SYSTEM_PYTHON} (readable by any user) is missing")
    root = dgx_h100(world_readable / "host").root
    wheel = make_nccl_wheel(world_readable / "site-packages", 12, "2.27.3")
    subprocess.run(["chmod", "-R", "a+rX", str(world_readable)], check=True)
    shared = world_readable / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # an emptyDir
    main_container = {"runAsUser": 0, "capabilitiesAdd": ["IPC_LOCK"], "cudaMajor": 12}
    env = {
        "PYTHONPATH": str(RDMA_INIT_SOURCES),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TPFABRIC_NCCL_WHEEL_PATH": str(wheel),
        "TPFABRIC_MAIN_CONTAINER": json.dumps(main_container),
    }
    argv = [
        str(SYSTEM_PYTHON),
        "-m",
        "tpfabric_rdma_init",
        f"--root={root}",
        f"--shared-dir={shared}",
        "--annotations-file=",
        "--policy=required",
        "--nccl-library=shipped",
    ]
    done = subprocess.run(
        as_the_init_container(argv, env), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((shared / "rdma-init-report.json").read_text())
    assert report["nccl"]["library"]["version"] == "2.27.3"  # shipped: copied from the image
    for name in ("nccl.conf", "rdma-init-report.json", "lib/libnccl.so.2"):
        written = shared / name
        assert written.stat().st_uid == INIT_SECURITY_CONTEXT["runAsUser"], name
        # the main container (root or any other user) reads it
        assert written.stat().st_mode & stat.S_IROTH, f"{name}: {oct(written.stat().st_mode)}"
    assert "NCCL_IB_HCA" in (shared / "nccl.conf").read_text()
