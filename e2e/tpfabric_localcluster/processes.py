"""Start, watch and stop the component processes of a local cluster.

A component is identified by its pid *and* its start time, so ``stop`` never signals a process that
merely reused a pid. Each component runs in its own session (process group) with its output in a
log file; a crash is reported with the tail of that log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

__all__ = ["ComponentCrashedError", "ComponentProcess", "log_tail", "start_component"]


#: how far a process's start time may drift from the recorded one (see ComponentProcess._process)
CREATE_TIME_SLACK_SECONDS = 120.0


class ComponentCrashedError(RuntimeError):
    """A component exited or never became healthy; the message carries its log tail."""


def log_tail(path: Path, lines: int = 20) -> str:
    """Return the last ``lines`` lines of a log file ('' when there is none)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class ComponentProcess:
    """A started component: enough to find it again from another process."""

    name: str
    pid: int
    create_time: float
    log: str
    argv: list[str]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ComponentProcess:
        """Return the component described by ``to_json`` output."""
        return cls(**data)

    def port(self, flag: str = "--port") -> int:
        """Return the port the component was started with (``flag=N`` in its argv)."""
        return next(int(a.split("=", 1)[1]) for a in self.argv if a.startswith(f"{flag}="))

    def _process(self) -> psutil.Process | None:
        try:
            proc = psutil.Process(self.pid)
            # psutil derives start times from the boot time, which it reads as wall clock minus
            # uptime: when the clock is stepped or slewed (a VM, NTP), every start time moves.
            # A generous window still tells a reused pid apart (pids are not reused that fast).
            if abs(proc.create_time() - self.create_time) > CREATE_TIME_SLACK_SECONDS:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            return None
        return proc

    def alive(self) -> bool:
        """Return whether this very process (pid and start time) is still running."""
        return self._process() is not None

    def crash_report(self) -> str:
        """Return a one-paragraph report with the log tail, for a component that died."""
        return f"{self.name} (pid {self.pid}) is not running; log {self.log}:\n" + log_tail(
            Path(self.log)
        )

    def kill(self) -> None:
        """Kill the component at once (SIGKILL, no cleanup), as a crash would; wait for it."""
        proc = self._process()
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        psutil.wait_procs([proc], timeout=10)

    def stop(self, grace: float = 10.0) -> None:
        """Stop the component and its process group: SIGTERM, then SIGKILL after ``grace`` s."""
        proc = self._process()
        if proc is None:
            return
        members = [proc]
        with contextlib.suppress(psutil.Error):
            members += proc.children(recursive=True)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGTERM)
        _, still = psutil.wait_procs(members, timeout=grace)
        for member in still:
            with contextlib.suppress(psutil.Error):
                member.kill()
        psutil.wait_procs(still, timeout=5)


def start_component(
    name: str, argv: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None
) -> ComponentProcess:
    """Start ``argv`` in its own session with output to ``log``; return its identity."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=None if env is None else {**os.environ, **env},
            start_new_session=True,
        )
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        created = time.time()
    return ComponentProcess(name, proc.pid, created, str(log), argv)
