"""Real processes for the metering tests: gateways (`tests/processes.py`) and a throwaway
redis-server, each in its own process group, always stopped."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.harness import free_port
from tests.processes import GatewayProcess, Process

__all__ = ["GatewayProcess", "RedisProcess", "write_config"]


class RedisProcess(Process):
    """A redis-server of the test's own, persisting every write (appendfsync always), so a
    kill and restart loses nothing."""

    def __init__(self, directory: Path, port: int | None = None, *settings: str) -> None:
        """`settings`: more redis-server arguments, which may override these."""
        self.port = port or free_port()
        self.directory = directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory)]
        args += ["--save", "", "--appendonly", "yes", "--appendfsync", "always", *settings]
        what = f"redis-server on port {self.port}"
        super().__init__(args, directory / "redis.log", RedisProcess._ready, what)

    def _ready(self) -> bool:
        ping = ["redis-cli", "-p", str(self.port), "ping"]
        result = subprocess.run(ping, capture_output=True, text=True, check=False, timeout=30)
        return result.stdout.strip() == "PONG"

    def restart(self) -> RedisProcess:
        self.kill()
        return RedisProcess(self.directory, self.port)


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path
