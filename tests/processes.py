"""Real processes for tests (gateways, redis-servers, simulators...): each started in a
process group of its own, waited on by a readiness check with a generous timeout, and
always stopped, the whole group, even when it never became ready.

The machine that runs the suite may be small and busy: a multi-worker gateway has been seen
to take 30-50 s to start under load. `TOLLGATE_TEST_START_TIMEOUT_S` (default 120) bounds
every wait for a process to become ready.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = float(os.environ.get("TOLLGATE_TEST_START_TIMEOUT_S", "120"))
STOP_TIMEOUT_S = 60.0


def wait_until(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.05)


def start_group(
    args: list[str],
    out: int | IO[bytes] | None = subprocess.DEVNULL,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A process in a new session (its own process group), so that stopping it stops its children."""
    return subprocess.Popen(
        args,
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=dict(env) if env is not None else None,
    )


def stop_group(popen: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Signal the process's group, wait for it; SIGKILL the group if it does not exit in time.
    The group is signalled even when the leader has exited (its children may not have)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=STOP_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGKILL)
    if popen.poll() is None:
        popen.wait(timeout=STOP_TIMEOUT_S)


def http_ready(url: str, popen: subprocess.Popen[bytes], log: Path | None = None) -> Callable[[], bool]:
    """A readiness check: `url` answers 200; raises if the process exited meanwhile."""

    def ready() -> bool:
        if popen.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
            raise RuntimeError(f"{popen.args!r} exited with {popen.returncode}: {tail}")
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    return ready


class Process:
    """A process group started for a test; `ready` is waited on, and on any failure to
    become ready the group is stopped before the error is raised."""

    def __init__(self, args: list[str], log: Path, ready: Callable[[Process], bool], what: str) -> None:
        self.args = args
        self.log = log
        with log.open("ab") as out:
            self.popen = start_group(args, out)
        try:
            wait_until(lambda: ready(self), START_TIMEOUT_S, f"{what} (log: {log})")
        except BaseException:
            stop_group(self.popen, signal.SIGKILL)
            raise

    def kill(self, sig: int = signal.SIGKILL) -> None:
        stop_group(self.popen, sig)


class GatewayProcess(Process):
    """`tollgate serve` (python -m gateway.cli serve), ready when /healthz answers."""

    def __init__(self, config: Path, port: int, workers: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        args = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
        args += ["--port", str(port), "--workers", str(workers)]
        super().__init__(
            args, log, lambda p: http_ready(self.url + "/healthz", p.popen, log)(), f"gateway on port {port}"
        )

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


# For a test that starts processes: room for a few slow starts and stops beyond the suite's 120 s.
process_timeout = pytest.mark.timeout(4 * START_TIMEOUT_S + 120)
