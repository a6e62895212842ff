"""Hot reload across the workers of a machine: an edited revision is checked once, by one
worker, and every worker swaps to it on the shared announcement; a worker started while a
refused edit sits in the directory serves what the others serve."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from adapters.policy.rego import RegoEngine
from adapters.policy.source import PolicyLoadError
from simulator import RunningSimulator
from tests.harness import chat_body, eventually, free_port
from tests.metering.processes import GatewayProcess
from tests.policy.conftest import policy_config
from tests.policy.gateway_setup import TENANTS, policy_gateway_config, write_policy_dir
from tests.policy.test_reload import BROKEN_EDITS, WAIT_S, append, set_models
from tests.servers import TEST_KEY


@pytest.fixture
async def engines(policy_dir: Path, tmp_path: Path) -> AsyncIterator[list[RegoEngine]]:
    """Two engines on one directory and one state directory, as two workers of a machine."""
    config = policy_config(dir=str(policy_dir), reload_interval_s=0.05, state_dir=str(tmp_path / "state"))
    opened = [await RegoEngine.open(config) for _ in range(2)]
    try:
        yield opened
    finally:
        for engine in opened:
            await engine.aclose()


async def until(predicate: object, seconds: float = WAIT_S) -> None:
    assert callable(predicate)
    async with asyncio.timeout(seconds):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_an_edit_is_checked_once_and_served_by_every_worker(
    engines: list[RegoEngine], policy_dir: Path
) -> None:
    first = engines[0].revision
    set_models(policy_dir, "demo", ["kimi-k2.6", "embeddings"])
    await until(lambda: all(e.revision != first for e in engines))
    assert engines[0].revision == engines[1].revision
    assert sum(e.reload_counts.checked for e in engines) == 1
    assert [e.reload_counts.reloaded for e in engines] == [1, 1]


async def test_a_broken_edit_is_checked_once_and_refused_by_every_worker(
    engines: list[RegoEngine], policy_dir: Path
) -> None:
    first = engines[0].revision
    file, text, why = BROKEN_EDITS["failing tests"]
    append(policy_dir, file, text)
    await until(lambda: all(e.reload_counts.refused == 1 for e in engines))
    assert sum(e.reload_counts.checked for e in engines) == 1
    assert [e.revision for e in engines] == [first, first]
    assert all(why in (e.reload_counts.last_error or "") for e in engines)


async def test_a_worker_started_over_a_refused_edit_serves_the_announced_revision(
    engines: list[RegoEngine], policy_dir: Path, tmp_path: Path
) -> None:
    set_models(policy_dir, "demo", ["kimi-k2.6", "embeddings"])  # an accepted edit, announced
    first = engines[0].revision
    await until(lambda: engines[0].revision != first)
    announced = engines[0].revision
    append(policy_dir, *BROKEN_EDITS["a syntax error"][:2])
    await until(lambda: engines[0].reload_counts.refused == 1)
    config = policy_config(dir=str(policy_dir), reload_interval_s=0.05, state_dir=str(tmp_path / "state"))
    late = await RegoEngine.open(config)  # would not compile the directory as it is
    try:
        assert late.revision == announced
        await until(lambda: late.reload_counts.refused == 1)
        assert late.reload_counts.checked == 0  # the verdict was the machine's already
    finally:
        await late.aclose()


@pytest.mark.slow
def test_every_worker_of_a_served_gateway_swaps_on_one_check(
    tmp_path: Path, upstream_sim: RunningSimulator
) -> None:
    directory = write_policy_dir(tmp_path / "policies")
    config = policy_gateway_config(
        upstream_sim, {"dir": str(directory), "state_dir": str(tmp_path / "state")}
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    config_file = tmp_path / "gw.yaml"
    config_file.write_text(yaml.safe_dump(config))
    log = tmp_path / "gw.log"
    gateway = GatewayProcess(config_file, free_port(), 2, log)
    try:
        assert _status(gateway.url, "failover") == 200
        # Both workers up before the edit (a worker that starts after it compiles it at start).
        assert eventually(lambda: _startups(log) == 2, WAIT_S), log.read_text()[-3000:]
        set_models(directory, "alpha", [m for m in TENANTS["alpha"]["models"] if m != "failover"])
        assert eventually(lambda: len(_lines(log, "policy reloaded")) >= 2, WAIT_S), log.read_text()[-3000:]
        reloads = _lines(log, "policy reloaded")
        assert len({line["pid"] for line in reloads}) == 2  # both workers swapped...
        assert len({line["revision"] for line in reloads}) == 1  # ...to the same revision
        checks = _lines(log, "policy revision checked")
        assert [c["revision"] for c in checks] == [reloads[0]["revision"]]  # checked once, by one worker
        assert all(_status(gateway.url, "failover") == 403 for _ in range(20))
        assert all(_status(gateway.url, "chat") == 200 for _ in range(5))
    finally:
        gateway.stop()


def _startups(log: Path) -> int:
    return sum('"Application startup complete."' in raw for raw in log.read_text().splitlines())


def _lines(log: Path, message: str) -> list[dict[str, object]]:
    found = []
    for raw in log.read_text().splitlines():
        if raw.startswith("{"):
            line = orjson.loads(raw)
            if line.get("msg") == message:
                found.append(line)
    return found


def _status(url: str, model: str) -> int:
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    started = time.monotonic()
    while True:
        try:
            return httpx.post(
                url + "/v1/chat/completions", json=chat_body(model), headers=headers, timeout=30
            ).status_code
        except httpx.TransportError:
            if time.monotonic() - started > 30:
                raise


async def test_a_state_directory_others_may_write_to_stops_the_start(
    policy_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o777)  # anyone could plant a verdict and a bundle there
    with pytest.raises(PolicyLoadError, match="writable by no one else"):
        await RegoEngine.open(policy_config(dir=str(policy_dir), state_dir=str(state)))
