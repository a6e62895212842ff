"""Real processes for the metering tests: gateways (`python -m gateway.cli serve`) and a
throwaway redis-server, each in its own process group, always stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[2]


def wait_until(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Process:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)


class GatewayProcess(Process):
    def __init__(self, config: Path, port: int, workers: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        args = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
        super().__init__([*args, "--port", str(port), "--workers", str(workers)], log)
        wait_until(self._ready, 30, f"gateway on port {port} (log: {log})")

    def _ready(self) -> bool:
        if self.popen.poll() is not None:
            raise RuntimeError(f"gateway exited: {self.log.read_text()[-2000:]}")
        try:
            return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


class RedisProcess(Process):
    """A redis-server of the test's own, persisting every write (appendfsync always), so a
    kill and restart loses nothing."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.directory = directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory)]
        args += ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        super().__init__(args, directory / "redis.log")
        wait_until(self._ready, 15, f"redis-server on port {self.port}")

    def _ready(self) -> bool:
        result = subprocess.run(
            ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True, check=False
        )
        return result.stdout.strip() == "PONG"

    def restart(self) -> RedisProcess:
        self.kill()
        return RedisProcess(self.directory, self.port)


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path
