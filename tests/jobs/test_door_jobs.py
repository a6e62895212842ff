"""Async jobs through the Responses and Messages doors, with the real `openai` and `anthropic`
SDKs: `Prefer: respond-async` on both (polled in the door's own format, errors in its
envelope), and the Responses API's own form, `background: true` (`responses.retrieve` polls it,
`responses.cancel` cancels it). The real gateway (in-process uvicorn, SQLite stores in a
temporary directory) in front of the simulator, over loopback."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import openai_error
from tests.jobs.gateways import OTHER, auth, jobs_config, poll_job
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway, running_gateway

ASYNC = {"prefer": "respond-async"}
SECRET = "someone.private@example.org"


def _config(sim: RunningSimulator, tmp: Path, **jobs: Any) -> Any:
    redaction = {"request": "mask", "response": "off", "entities": ["EMAIL"]}
    responses = {"sqlite_path": str(tmp / "responses.db"), "retention_s": 3600}
    return jobs_config(sim, tmp, redaction=redaction, responses=responses, jobs=jobs)


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("door-jobs")


@pytest.fixture(scope="module")
def gateway(sim: RunningSimulator, jobs_dir: Path) -> Iterator[RunningGateway]:
    with running_gateway(_config(sim, jobs_dir)) as running:
        yield running


@pytest.fixture(scope="module")
def held_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("door-jobs-held")


@pytest.fixture(scope="module")
def holding(sim: RunningSimulator, held_dir: Path) -> Iterator[RunningGateway]:
    """A gateway that accepts jobs and runs none (`jobs.pull: false`): they stay queued."""
    with running_gateway(_config(sim, held_dir, pull=False)) as running:
        yield running


@pytest.fixture
def http(gateway: RunningGateway, sim: RunningSimulator) -> Iterator[httpx.Client]:
    sim.faults.clear()
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client
    sim.faults.clear()


@pytest.fixture
def oai(gateway: RunningGateway, sim: RunningSimulator) -> Iterator[openai.OpenAI]:
    sim.faults.clear()
    with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client:
        yield client
    sim.faults.clear()


@pytest.fixture
def claude(gateway: RunningGateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gateway.url, api_key=TEST_KEY, max_retries=0) as client:
        yield client


def _settled(oai: openai.OpenAI, response_id: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while (response := oai.responses.retrieve(response_id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, f"the response did not finish: {response}"
        time.sleep(0.05)
    return response


def test_a_background_response_is_queued_then_polled_to_completed_and_continues(oai: openai.OpenAI) -> None:
    queued = oai.responses.create(
        model="chat", instructions="Be brief.", input="hello", max_output_tokens=16, background=True
    )
    assert queued.status in ("queued", "in_progress")
    assert queued.background is True and queued.id.startswith("resp_")
    assert queued.output == [] and queued.instructions == "Be brief."
    done = _settled(oai, queued.id)
    assert done.status == "completed" and done.id == queued.id and done.background is True
    sync = oai.responses.create(model="chat", input="hello", max_output_tokens=16, store=False)
    assert done.output_text == sync.output_text
    assert done.usage is not None and done.usage.output_tokens == sync.usage.output_tokens  # type: ignore[union-attr]
    follow = oai.responses.create(model="chat", input="and then?", previous_response_id=done.id)
    assert follow.status == "completed"


def test_a_background_response_that_fails_is_failed_with_the_error(
    oai: openai.OpenAI, sim: RunningSimulator
) -> None:
    sim.faults.set({"status": 400, "message": "the upstream refuses this"}, count=1)
    queued = oai.responses.create(model="chat", input="refuse me", background=True)
    failed = _settled(oai, queued.id)
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.message
    assert oai.responses.retrieve(queued.id).status == "failed"  # written back: stays failed
    with pytest.raises(openai.BadRequestError, match="has not completed"):
        oai.responses.create(model="chat", input="more", previous_response_id=queued.id)


def test_a_queued_background_response_is_cancelled_and_stays_cancelled(holding: RunningGateway) -> None:
    with openai.OpenAI(base_url=holding.base_url, api_key=TEST_KEY, max_retries=0) as held:
        queued = held.responses.create(model="chat", input="never run", background=True)
        assert held.responses.retrieve(queued.id).status == "queued"
        cancelled = held.responses.cancel(queued.id)
        assert cancelled.status == "cancelled" and cancelled.id == queued.id
        assert held.responses.retrieve(queued.id).status == "cancelled"
        assert held.responses.cancel(queued.id).status == "cancelled"  # again: unchanged
        sync = held.responses.create(model="chat", input="not in the background")
        with pytest.raises(openai.BadRequestError, match="background"):
            held.responses.cancel(sync.id)


def test_another_tenant_cannot_read_or_cancel_a_background_response(
    holding: RunningGateway,
) -> None:
    with httpx.Client(base_url=holding.url, timeout=30) as http:
        body = {"model": "chat", "input": "mine", "background": True}
        queued = http.post("/v1/responses", json=body, headers=auth())
        assert queued.status_code == 200, queued.text
        response_id = queued.json()["id"]
        openai_error(http.get(f"/v1/responses/{response_id}", headers=OTHER), 404)
        openai_error(http.post(f"/v1/responses/{response_id}/cancel", headers=OTHER), 404)
        assert http.get(f"/v1/responses/{response_id}", headers=auth()).json()["status"] == "queued"


def test_background_is_governed_and_stored_redacted_at_submission(
    oai: openai.OpenAI, http: httpx.Client, jobs_dir: Path
) -> None:
    with pytest.raises(openai.NotFoundError):  # a model the key may not use: refused now
        openai.OpenAI(base_url=oai.base_url, api_key=OTHER_TENANT_KEY, max_retries=0).responses.create(
            model="kimi", input="hi", background=True
        )
    with pytest.raises(openai.BadRequestError, match="store"):
        oai.responses.create(model="chat", input="hi", background=True, store=False)
    streamed = openai_error(
        http.post(
            "/v1/responses",
            json={"model": "chat", "input": "x", "background": True, "stream": True},
            headers=auth(),
        ),
        400,
    )
    assert streamed["code"] == "stream_not_supported"
    queued = oai.responses.create(**_secret_request())
    done = _settled(oai, queued.id)
    assert done.status == "completed"
    assert SECRET not in str(done.instructions) and SECRET not in str(done.metadata)
    [item] = oai.responses.input_items.list(done.id).data
    assert item.content[0].text == "mail [EMAIL] please"  # type: ignore[union-attr]
    assert SECRET not in str(_rows(jobs_dir / "responses.db", "SELECT * FROM responses"))


def test_a_queued_background_job_and_its_record_hold_the_request_redacted(
    holding: RunningGateway, held_dir: Path
) -> None:
    with openai.OpenAI(base_url=holding.base_url, api_key=TEST_KEY, max_retries=0) as held:
        queued = held.responses.create(**_secret_request())
        assert queued.status == "queued"  # answered to its own client as sent, as a sync one is
        read = held.responses.retrieve(queued.id)
        assert SECRET not in str(read.instructions) and SECRET not in str(read.metadata)
        [item] = held.responses.input_items.list(queued.id).data  # listed before it has run
        assert item.content[0].text == "mail [EMAIL] please"  # type: ignore[union-attr]
        held.responses.cancel(queued.id)
    payloads = _rows(held_dir / "jobs.db", "SELECT payload FROM jobs WHERE payload IS NOT NULL")
    records = _rows(held_dir / "responses.db", "SELECT * FROM responses")
    assert payloads and records
    assert SECRET not in str(payloads) and SECRET not in str(records)


def _secret_request() -> dict[str, Any]:
    return {
        "model": "chat",
        "instructions": f"Write to {SECRET} if asked.",
        "input": f"mail {SECRET} please",
        "metadata": {"owner": SECRET},
        "background": True,
    }


def _rows(db_path: Path, query: str) -> list[Any]:
    with sqlite3.connect(db_path) as db:
        return list(db.execute(query))


def test_prefer_respond_async_on_responses_polls_a_response_object(http: httpx.Client) -> None:
    body = {"model": "chat", "input": "hello", "max_output_tokens": 16}
    accepted = http.post("/v1/responses", json=body, headers={**auth(), **ASYNC})
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["id"]
    assert job_id.startswith("resp_") and accepted.headers["location"] == f"/v1/async/{job_id}"
    done = poll_job(http, accepted.headers["location"], auth())
    assert done.status_code == 200, done.text
    response = openai.types.responses.Response.model_validate(done.json())
    assert response.id == job_id and response.status == "completed" and response.output_text
    stored = http.get(f"/v1/responses/{job_id}", headers=auth())
    assert stored.status_code == 200 and stored.json()["output"] == done.json()["output"]


def test_prefer_respond_async_on_responses_answers_errors_in_openai_envelope(
    http: httpx.Client, sim: RunningSimulator
) -> None:
    sim.faults.set({"status": 400, "message": "the upstream refuses this"}, count=1)
    body = {"model": "chat", "input": "refuse me"}
    accepted = http.post("/v1/responses", json=body, headers={**auth(), **ASYNC})
    assert openai_error(poll_job(http, accepted.headers["location"], auth()), 400)["message"]


def test_prefer_respond_async_on_messages_polls_a_message(
    claude: anthropic.Anthropic, http: httpx.Client
) -> None:
    raw = claude.messages.with_raw_response.create(
        model="chat",
        max_tokens=16,
        messages=[{"role": "user", "content": "hello"}],
        extra_headers=ASYNC,
    )
    assert raw.status_code == 202
    job_id = raw.http_response.json()["id"]
    assert job_id.startswith("msg_") and raw.headers["location"] == f"/v1/async/{job_id}"
    polled = poll_job(http, raw.headers["location"], {"x-api-key": TEST_KEY})
    assert polled.status_code == 200, polled.text
    message = anthropic.types.Message.model_validate(polled.json())
    assert message.id == job_id and message.stop_reason == "end_turn"
    sync = claude.messages.create(
        model="chat", max_tokens=16, messages=[{"role": "user", "content": "hello"}]
    )
    assert message.content == sync.content and message.usage.output_tokens == sync.usage.output_tokens


def test_prefer_respond_async_on_messages_answers_errors_in_anthropic_envelope(
    claude: anthropic.Anthropic, http: httpx.Client, sim: RunningSimulator
) -> None:
    with pytest.raises(anthropic.NotFoundError):  # refused at submission, in Anthropic's envelope
        claude.messages.create(
            model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}], extra_headers=ASYNC
        )
    sim.faults.set({"status": 400, "message": "the upstream refuses this"}, count=1)
    body = {"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "refuse me"}]}
    accepted = http.post("/v1/messages", json=body, headers={"x-api-key": TEST_KEY, **ASYNC})
    assert accepted.status_code == 202, accepted.text
    failed = poll_job(http, accepted.headers["location"], {"x-api-key": TEST_KEY})
    assert failed.status_code == 400
    error = failed.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"]
    missing = http.get("/v1/async/msg_doesnotexist", headers={"x-api-key": TEST_KEY})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_a_cancelled_messages_job_answers_in_anthropic_envelope(holding: RunningGateway) -> None:
    with httpx.Client(base_url=holding.url, timeout=30) as http:
        body = {"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
        accepted = http.post("/v1/messages", json=body, headers={"x-api-key": TEST_KEY, **ASYNC})
        assert accepted.status_code == 202, accepted.text
        cancelled = http.delete(accepted.headers["location"], headers={"x-api-key": TEST_KEY})
        assert cancelled.status_code == 499
        assert cancelled.json()["type"] == "error"
