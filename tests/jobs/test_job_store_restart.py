"""The Redis job store restarts while a gateway holds claimed jobs under way upstream: no job
is lost, each completes (the claims, the stream's pending entries and the job hashes are in
Redis's append-only file), and none is charged twice. A real gateway process (`tollgate
serve`), a real redis-server of the test's own, killed and started again."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import eventually, free_port
from tests.jobs.gateways import auth, jobs_config, poll_job
from tests.jobs.test_job_failover import ledger_micros
from tests.metering.processes import RedisProcess, write_config
from tests.processes import GatewayProcess, process_timeout
from tests.servers import UPSTREAM_KEY

JOBS = 4


@pytest.fixture
def slow_sim() -> Iterator[RunningSimulator]:
    """Each answer takes about three seconds (0.4 s a token), so jobs are in flight when Redis dies."""
    running = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, decode_s_per_token=0.4))
    yield running
    running.stop()


def _cost(usage: dict[str, object]) -> int:
    details = usage.get("prompt_tokens_details") or {}
    assert isinstance(details, dict)
    cached = int(details.get("cached_tokens", 0))
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    assert isinstance(prompt, int) and isinstance(completion, int)
    return (prompt - cached) * 1000 + cached * 100 + completion * 2000


@process_timeout
def test_jobs_claimed_when_the_redis_job_store_restarts_are_completed_and_charged_once(
    tmp_path: Path, slow_sim: RunningSimulator
) -> None:
    (tmp_path / "redis").mkdir()
    store = RedisProcess(tmp_path / "redis")
    gateway: GatewayProcess | None = None
    try:
        jobs = {"store": "redis", "redis_url": store.url, "key_prefix": "restart", "visibility_s": 2}
        config = jobs_config(slow_sim, tmp_path, jobs=jobs)
        path = write_config(
            tmp_path / "gateway.yaml", config.model_dump(mode="json", by_alias=True, exclude_none=True)
        )
        gateway = GatewayProcess(path, free_port(), 1, tmp_path / "gateway.log")
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            locations = []
            for i in range(JOBS):
                messages = [{"role": "user", "content": f"job {i}"}]
                body = {"model": "chat", "max_tokens": 8, "messages": messages}
                accepted = http.post(
                    "/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"}
                )
                assert accepted.status_code == 202, accepted.text
                locations.append(accepted.headers["location"])
            # Every job claimed and under way upstream, none answered yet: then Redis dies.
            assert eventually(lambda: len(slow_sim.requests) >= JOBS, seconds=60)
            store = store.restart()
            with redis.Redis.from_url(store.url) as client:
                pending = client.xpending("restart:{jobs}:stream", "workers")
            assert pending["pending"] == JOBS  # the claims outlived the restart
            answers = [poll_job(http, location, auth(), seconds=120) for location in locations]
        assert [a.status_code for a in answers] == [200] * JOBS, [a.text for a in answers]
        assert ledger_micros(tmp_path / "state.db") == sum(_cost(a.json()["usage"]) for a in answers)
        with redis.Redis.from_url(store.url) as client:
            assert client.xpending("restart:{jobs}:stream", "workers")["pending"] == 0
    finally:
        if gateway is not None:
            gateway.kill(signal.SIGTERM)
        store.kill()
