"""OpenAI's Batch API through the real `openai` client: files, batches, output and error
files, against the real gateway (in-process) and the simulator answering Workers AI's 3040
to a third of first attempts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from simulator import RunningSimulator
from tests.jobs.gateways import ADMIN_TOKEN, OTHER, auth, jobs_config, spend_micros
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway, running_gateway

LINES = 2000
MAX_FILE_BYTES = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def gateway(sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    config = jobs_config(
        sim, tmp_path_factory.mktemp("batches"), jobs={"max_file_bytes": MAX_FILE_BYTES, "concurrency": 64}
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture
def client(gateway: RunningGateway, sim: RunningSimulator) -> Iterator[openai.OpenAI]:
    sim.faults.clear()
    with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0, timeout=120) as made:
        yield made
    sim.faults.clear()


@pytest.fixture
def other(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as made:
        yield made


@pytest.fixture
def admin_http(gateway: RunningGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30) as made:
        yield made


def request_line(custom_id: str, content: str, model: str = "kimi-sync", **body: Any) -> bytes:
    line = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": model, "messages": [{"role": "user", "content": content}], **body},
    }
    return orjson.dumps(line)


def jsonl(lines: list[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n"


def wait_done(client: openai.OpenAI, batch_id: str, seconds: float = 240) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "cancelled", "failed", "expired"):
            return batch
        assert time.monotonic() < deadline, f"batch not done: {batch.request_counts}"
        time.sleep(0.2)


def read_jsonl(text: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.timeout(600)
def test_two_thousand_lines_complete_through_capacity_errors_and_spend_is_their_sum(
    client: openai.OpenAI, sim: RunningSimulator, admin_http: httpx.Client
) -> None:
    before = spend_micros(admin_http, "alpha")
    sim.clear()
    sim.faults.set({"status": 429, "code": 3040}, every=3, first_attempts=True)
    lines = [request_line(f"req-{i}", f"question number {i}", max_tokens=4 + i % 5) for i in range(LINES)]
    uploaded = client.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(jsonl(lines))
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "capacity"},
    )
    assert batch.status in ("in_progress", "completed") and batch.request_counts.total == LINES
    done = wait_done(client, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (LINES, 0)
    assert done.metadata == {"run": "capacity"} and done.error_file_id is None
    output = read_jsonl(client.files.content(done.output_file_id).read())
    assert sorted(line["custom_id"] for line in output) == sorted(f"req-{i}" for i in range(LINES))
    cost = 0
    for line in output:
        assert line["error"] is None and line["id"].startswith("batch_req_")
        response = line["response"]
        assert response["status_code"] == 200 and response["request_id"]
        completion = response["body"]
        assert completion["object"] == "chat.completion" and completion["choices"][0]["message"]["content"]
        usage = completion["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        cost += (usage["prompt_tokens"] - cached) * 1000 + cached * 100 + usage["completion_tokens"] * 2000
    assert spend_micros(admin_http, "alpha") - before == cost
    # A third of the first attempts were refused with 3040, and each of those was tried once more.
    sent = [
        r
        for r in sim.requests
        if r.path.endswith("/ai/v1/chat/completions") and "question number" in str(r.body)
    ]
    assert len(sent) == LINES + LINES // 3


def test_a_malformed_line_fails_alone_with_its_custom_id(client: openai.OpenAI) -> None:
    lines = [
        request_line("good-1", "hello"),
        b'{"custom_id": "broken-1", "method": "POST", "url": "/v1/chat/completions", "body": {',
        request_line("wrong-url", "hello").replace(b"/v1/chat/completions", b"/v1/completions"),
        request_line("no-messages", "x").replace(b'"messages"', b'"mesages"'),
        request_line("good-1", "repeated id"),
        request_line("good-2", "hello again"),
    ]
    uploaded = client.files.create(file=("mixed.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_done(client, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 2, 4)
    output = read_jsonl(client.files.content(done.output_file_id).read())
    assert [line["custom_id"] for line in output] == ["good-1", "good-2"]
    errors = read_jsonl(client.files.content(done.error_file_id).read())
    by_id = {line["custom_id"]: line for line in errors}
    assert set(by_id) == {"broken-1", "wrong-url", "no-messages", "good-1"}
    broken = by_id["broken-1"]
    assert broken["response"] is None and broken["error"]["code"] == "invalid_line"
    assert "line 2" in broken["error"]["message"].lower() and "json" in broken["error"]["message"].lower()
    assert "url" in by_id["wrong-url"]["error"]["message"]
    assert "repeated" in by_id["good-1"]["error"]["message"]
    refused = by_id["no-messages"]["response"]  # refused by validation, as the sync call would be
    assert refused["status_code"] == 400 and refused["body"]["error"]["message"]


def test_an_oversized_file_is_refused_before_it_is_stored(client: openai.OpenAI) -> None:
    line = request_line("big", "x" * 1000)
    big = jsonl([line] * (MAX_FILE_BYTES // len(line) + 10))
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=("big.jsonl", big), purpose="batch")
    assert refused.value.status_code == 413
    assert "limit" in refused.value.message


def test_files_and_batches_are_the_tenants_own(client: openai.OpenAI, other: openai.OpenAI) -> None:
    uploaded = client.files.create(
        file=("one.jsonl", jsonl([request_line("a", "hi", model="chat")])), purpose="batch"
    )
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        other.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.batches.cancel(batch.id)
    assert batch.id not in [b.id for b in other.batches.list()]
    done = wait_done(client, batch.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(done.output_file_id)
    assert batch.id in [b.id for b in client.batches.list(limit=100)]
    assert client.files.retrieve(uploaded.id).filename == "one.jsonl"
    assert uploaded.id in [f.id for f in client.files.list()]
    assert uploaded.id not in [f.id for f in other.files.list()]
    with pytest.raises(openai.NotFoundError):
        other.files.delete(uploaded.id)
    assert client.files.delete(uploaded.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_a_cancelled_batch_runs_no_more_lines(client: openai.OpenAI, sim: RunningSimulator) -> None:
    # Nothing gets through while the batch lives: its lines can only end by being cancelled
    # (a retried line would otherwise wait out its 24 h window).
    sim.faults.set({"status": 503})
    lines = [request_line(f"c{i}", f"cancel {i}", model="chat") for i in range(20)]
    uploaded = client.files.create(file=("cancel.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait_done(client, batch.id)
    assert done.status == "cancelled"
    counts = done.request_counts
    assert (counts.total, counts.completed, counts.failed) == (20, 0, 20)
    errors = read_jsonl(client.files.content(done.error_file_id).read())
    assert sorted(line["custom_id"] for line in errors) == sorted(f"c{i}" for i in range(20))
    assert {line["error"]["code"] for line in errors} == {"job_cancelled"}

    # Once the upstream answers again, no line of the cancelled batch runs: wait past the
    # longest retry backoff and the runner's reuse of its "cancelled?" answer.
    sim.faults.clear()
    time.sleep(1.5)
    answered = [r for r in sim.requests if r.status == 200 and "cancel " in orjson.dumps(r.body).decode()]
    assert answered == []


def test_bad_batch_requests_get_openai_errors(client: openai.OpenAI, admin_http: httpx.Client) -> None:
    with pytest.raises(openai.NotFoundError):
        client.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    uploaded = client.files.create(file=("x.jsonl", jsonl([request_line("a", "hi")])), purpose="batch")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError):
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="1h"
        )  # type: ignore[arg-type]
    assert (
        admin_http.post(
            "/v1/files", headers={**auth(), "content-type": "text/plain"}, content=b"x"
        ).status_code
        == 400
    )
    assert admin_http.get("/v1/batches", headers=OTHER).status_code == 200
    assert (
        admin_http.get("/v1/batches", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}).status_code == 401
    )
