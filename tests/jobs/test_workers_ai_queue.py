"""Jobs whose candidate is a Workers AI model with async support go through Workers AI's own
queue (`?queueRequest=true`, polled by `request_id`): end to end through the simulator's queue,
its pending states, its results out of order and its capacity windows."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest

from simulator import CapacityWindow, RunningSimulator, SimConfig, Simulator
from tests.jobs.gateways import auth, jobs_config, poll_job, spend_micros
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, running_gateway

KIMI = "@cf/moonshotai/kimi-k2.6"


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    running = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, queue_polls=2, running_polls=2))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with running_gateway(jobs_config(sim, tmp_path_factory.mktemp("workers-queue"))) as running:
        yield running


@pytest.fixture
def http(gateway: RunningGateway, sim: RunningSimulator) -> Iterator[httpx.Client]:
    sim.faults.clear()
    sim.capacity.clear()
    sim.clear()
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client
    sim.capacity.clear()


def queue_calls(sim: RunningSimulator) -> list[dict[str, object]]:
    return [r.body for r in sim.requests if "/ai/run/" in r.path and isinstance(r.body, dict)]


def test_a_job_goes_through_workers_ai_queue_and_is_polled_to_its_answer(
    http: httpx.Client, sim: RunningSimulator
) -> None:
    before = spend_micros(http, "alpha")
    body = {"model": "kimi", "max_tokens": 12, "messages": [{"role": "user", "content": "queue me"}]}
    accepted = http.post("/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"})
    assert accepted.status_code == 202
    job_id = accepted.json()["id"]
    done = poll_job(http, accepted.headers["location"], auth())
    assert done.status_code == 200, done.text
    answer = done.json()
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    calls = queue_calls(sim)
    submitted = [c for c in calls if "requests" in c]
    assert len(submitted) == 1
    [item] = submitted[0]["requests"]  # type: ignore[misc]
    assert item["external_reference"] == job_id and "model" not in item
    polls = [c for c in calls if "request_id" in c]
    assert len(polls) >= 5  # queued twice, running twice, then the result: no connection held meanwhile
    assert not any(r.path.endswith("/chat/completions") for r in sim.requests)  # never a synchronous call
    usage = answer["usage"]
    cost = usage["prompt_tokens"] * 1000 + usage["completion_tokens"] * 2000
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    assert spend_micros(http, "alpha") - before == cost - cached * 900


def test_the_queue_waits_out_a_capacity_window(http: httpx.Client, sim: RunningSimulator) -> None:
    sim.capacity.set([CapacityWindow(0, 1.5)])  # no batch advances for the first 1.5 s
    body = {"model": "kimi", "messages": [{"role": "user", "content": "wait for capacity"}]}
    accepted = http.post("/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"})
    done = poll_job(http, accepted.headers["location"], auth())
    assert done.status_code == 200, done.text


def test_a_batch_through_the_workers_ai_queue(gateway: RunningGateway, sim: RunningSimulator) -> None:
    lines = [
        orjson.dumps(
            {
                "custom_id": f"q{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "kimi", "messages": [{"role": "user", "content": f"queued {i}"}]},
            }
        )
        for i in range(10)
    ]
    with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client:
        uploaded = client.files.create(file=("q.jsonl", b"\n".join(lines)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        for _ in range(600):
            batch = client.batches.retrieve(batch.id)
            if batch.status == "completed":
                break
            time.sleep(0.1)
        assert batch.status == "completed" and batch.request_counts is not None
        assert batch.request_counts.completed == 10
        assert batch.output_file_id is not None
        output = [orjson.loads(x) for x in client.files.content(batch.output_file_id).read().splitlines()]
    assert sorted(line["custom_id"] for line in output) == sorted(f"q{i}" for i in range(10))
    submitted = [c for c in queue_calls(sim) if "requests" in c and "queued " in str(c)]
    assert len(submitted) == 10
