"""A job that meets capacity errors until its completion window ends fails then, with the
last error as its reason, and gives back what it reserved."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from simulator import RunningSimulator
from tests.harness import openai_error
from tests.jobs.gateways import auth, jobs_config, poll_job
from tests.servers import TEST_KEY, RunningGateway, running_gateway


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("expiry")


@pytest.fixture(scope="module")
def gateway(sim: RunningSimulator, state_dir: Path) -> Iterator[RunningGateway]:
    budgets = {"alpha": {"budgets": [{"window": "day", "usd": 100}]}, "beta": {"models": ["chat"]}}
    config = jobs_config(sim, state_dir, jobs={"completion_window_s": 1.5}, tenants=budgets)
    with running_gateway(config) as running:
        yield running


def open_reservations(state_dir: Path) -> int:
    with sqlite3.connect(state_dir / "state.db") as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM reservations WHERE tenant = 'alpha' AND state = 'o'"
        ).fetchone()
    return int(count)


def test_a_job_still_failing_when_its_window_ends_fails_with_the_reason(
    gateway: RunningGateway, sim: RunningSimulator, state_dir: Path
) -> None:
    sim.faults.set({"status": 429, "code": 3040})
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            body = {"model": "kimi-sync", "messages": [{"role": "user", "content": "never enough capacity"}]}
            accepted = http.post(
                "/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"}
            )
            assert accepted.status_code == 202
            assert open_reservations(state_dir) == 1  # reserved at submission, for the window
            error = openai_error(poll_job(http, accepted.headers["location"], auth()), 408)
        assert error["code"] == "job_expired"
        assert "upstream_overloaded" in error["message"] and "3040" in error["message"]
        assert open_reservations(state_dir) == 0
    finally:
        sim.faults.clear()


def test_expired_batch_lines_are_in_the_error_file(gateway: RunningGateway, sim: RunningSimulator) -> None:
    sim.faults.set({"status": 503})
    try:
        line = {
            "custom_id": "late",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "embed", "input": "x"},
        }
        with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client:
            uploaded = client.files.create(file=("e.jsonl", orjson.dumps(line)), purpose="batch")
            batch = client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
            )
            for _ in range(300):
                batch = client.batches.retrieve(batch.id)
                if batch.status == "completed":
                    break
                time.sleep(0.05)
            assert batch.status == "completed" and batch.error_file_id is not None
            [error_line] = [
                orjson.loads(x) for x in client.files.content(batch.error_file_id).read().splitlines()
            ]
        assert error_line["custom_id"] == "late" and error_line["response"] is None
        assert error_line["error"]["code"] == "job_expired"
    finally:
        sim.faults.clear()


def test_an_embeddings_batch_completes(gateway: RunningGateway) -> None:
    lines = [
        orjson.dumps(
            {
                "custom_id": f"e{i}",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": "embed", "input": f"text {i}"},
            }
        )
        for i in range(5)
    ]
    with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client:
        uploaded = client.files.create(file=("e.jsonl", b"\n".join(lines)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
        )
        for _ in range(300):
            batch = client.batches.retrieve(batch.id)
            if batch.status == "completed":
                break
            time.sleep(0.05)
        assert batch.request_counts is not None and batch.request_counts.completed == 5
        assert batch.output_file_id is not None
        output = [orjson.loads(x) for x in client.files.content(batch.output_file_id).read().splitlines()]
    assert all(line["response"]["body"]["object"] == "list" for line in output)
    assert all(line["response"]["body"]["data"][0]["embedding"] for line in output)
