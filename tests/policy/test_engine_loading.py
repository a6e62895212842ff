"""The embedded engine's native library is loaded only by a gateway that evaluates in process:
one that asks an OPA server (or has no policy) never loads regopy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_OPEN = """
import asyncio, sys
from adapters.policy import open_policy_engine
from gateway.config import PolicyConfig

async def main():
    config = PolicyConfig(dir={directory!r}, engine={engine!r}, opa={opa})
    engine = await open_policy_engine(config)
    await engine.aclose()

import gateway.app, gateway.cli
asyncio.run(main())
print("regopy" in sys.modules)
"""


def _loads_regopy(engine: str, directory: Path) -> bool:
    opa = {"url": "http://127.0.0.1:9"} if engine == "opa" else None  # never asked: nothing is evaluated
    code = _OPEN.format(directory=str(directory), engine=engine, opa=opa)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1] == "True"


def test_a_gateway_asking_an_opa_server_never_loads_regopy() -> None:
    assert not _loads_regopy("opa", ROOT / "policies")


def test_the_embedded_engine_loads_regopy_when_it_opens() -> None:
    assert _loads_regopy("rego", ROOT / "policies")
