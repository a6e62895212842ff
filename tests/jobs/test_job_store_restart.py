"""The Redis job store restarts while a gateway holds claimed jobs under way upstream (async
requests and a batch's lines): no job is lost, each completes, the batch's status and output
are whole (the claims, the stream's pending entries and the job hashes are in
Redis's append-only file), and none is charged twice. A real gateway process (`tollgate
serve`), a real redis-server of the test's own, killed and started again."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import eventually, free_port
from tests.jobs.gateways import auth, jobs_config, poll_job
from tests.jobs.test_batch_api import jsonl, read_jsonl, request_line, wait_done
from tests.jobs.test_job_failover import ledger_micros
from tests.metering.processes import RedisProcess, write_config
from tests.processes import GatewayProcess, process_timeout
from tests.servers import TEST_KEY, UPSTREAM_KEY

JOBS = 4
LINES = 2


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
            client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TEST_KEY, max_retries=0)
            lines = [request_line(f"line-{i}", f"line {i}", model="chat", max_tokens=8) for i in range(LINES)]
            uploaded = client.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")
            batch = client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            # Every job claimed and under way upstream, none answered yet: then Redis dies.
            assert eventually(lambda: len(slow_sim.requests) >= JOBS + LINES, seconds=60)
            store = store.restart()
            with redis.Redis.from_url(store.url) as direct:
                pending = direct.xpending("restart:{jobs}:stream", "workers")
            assert pending["pending"] == JOBS + LINES  # the claims outlived the restart
            answers = [poll_job(http, location, auth(), seconds=120) for location in locations]
            finished = wait_done(client, batch.id, seconds=120)
            assert finished.status == "completed", finished
            assert (finished.request_counts.completed, finished.request_counts.failed) == (LINES, 0)
            assert finished.output_file_id is not None
            output = read_jsonl(client.files.content(finished.output_file_id).read())
            client.close()
        assert [a.status_code for a in answers] == [200] * JOBS, [a.text for a in answers]
        assert sorted(line["custom_id"] for line in output) == [f"line-{i}" for i in range(LINES)]
        usages = [a.json()["usage"] for a in answers] + [line["response"]["body"]["usage"] for line in output]
        assert ledger_micros(tmp_path / "state.db") == sum(_cost(usage) for usage in usages)
        with redis.Redis.from_url(store.url) as direct:
            assert direct.xpending("restart:{jobs}:stream", "workers")["pending"] == 0
    finally:
        if gateway is not None:
            gateway.kill(signal.SIGTERM)
        store.kill()
