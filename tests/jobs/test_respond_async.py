"""`Prefer: respond-async` end to end: the real gateway (in-process uvicorn, SQLite stores in a
temporary directory) in front of the simulator, over loopback."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from simulator import RunningSimulator
from tests.harness import openai_error
from tests.jobs.gateways import OTHER, auth, jobs_config, poll_job, spend_micros
from tests.servers import RunningGateway, running_gateway

ASYNC = {"prefer": "respond-async"}
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("respond-async")


@pytest.fixture(scope="module")
def gateway(sim: RunningSimulator, jobs_dir: Path) -> Iterator[RunningGateway]:
    redaction = {"request": "mask", "response": "off", "entities": ["EMAIL"]}
    with running_gateway(jobs_config(sim, jobs_dir, redaction=redaction)) as running:
        yield running


@pytest.fixture
def http(gateway: RunningGateway, sim: RunningSimulator) -> Iterator[httpx.Client]:
    sim.faults.clear()
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client
    sim.faults.clear()


def question(text: str = "what is a tollgate?", **extra: object) -> dict[str, object]:
    return {"model": "chat", "messages": [{"role": "user", "content": text}], **extra}


def test_a_request_answered_later_is_the_completion_the_sync_call_returns(http: httpx.Client) -> None:
    accepted = http.post(CHAT, json=question(max_tokens=8), headers={**auth(), **ASYNC})
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()
    assert job["object"] == "async.job" and job["status"] in ("queued", "running")
    assert accepted.headers["location"] == f"/v1/async/{job['id']}"
    assert accepted.headers["preference-applied"] == "respond-async"
    done = poll_job(http, accepted.headers["location"], auth())
    assert done.status_code == 200, done.text
    answer = done.json()
    sync = http.post(CHAT, json=question(max_tokens=8), headers=auth()).json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"] == sync["choices"]
    assert answer["usage"] == sync["usage"]
    assert set(answer) == set(sync)


def test_another_tenant_cannot_see_or_cancel_the_job(http: httpx.Client) -> None:
    accepted = http.post(CHAT, json=question(), headers={**auth(), **ASYNC})
    location = accepted.headers["location"]
    openai_error(http.get(location, headers=OTHER), 404)
    openai_error(http.delete(location, headers=OTHER), 404)
    openai_error(http.get("/v1/async/job_doesnotexist", headers=auth()), 404)
    assert poll_job(http, location, auth()).status_code == 200


def test_a_refused_request_is_refused_at_submission_and_nothing_is_queued(http: httpx.Client) -> None:
    error = openai_error(http.post(CHAT, json={"model": "chat"}, headers={**auth(), **ASYNC}), 400)
    assert "messages" in error["message"]
    openai_error(http.post(CHAT, json=question(), headers={"authorization": "Bearer nope", **ASYNC}), 401)
    streamed = openai_error(http.post(CHAT, json=question(stream=True), headers={**auth(), **ASYNC}), 400)
    assert streamed["code"] == "stream_not_supported"
    openai_error(http.post(CHAT, content=b"{not json", headers={**auth(), **ASYNC}), 400)


def test_the_stored_job_holds_the_request_as_redaction_left_it(
    http: httpx.Client, sim: RunningSimulator, jobs_dir: Path
) -> None:
    secret = "someone.private@example.org"
    sim.faults.set({"status": 503}, count=1)  # the job waits in the queue for a retry meanwhile
    accepted = http.post(CHAT, json=question(f"mail {secret} please"), headers={**auth(), **ASYNC})
    assert accepted.status_code == 202
    with sqlite3.connect(jobs_dir / "jobs.db") as db:
        payloads = [row[0] for row in db.execute("SELECT payload FROM jobs WHERE payload IS NOT NULL")]
    assert payloads and not any(secret.encode() in payload for payload in payloads)
    assert poll_job(http, accepted.headers["location"], auth()).status_code == 200
    sent = [r for r in sim.requests if r.path.endswith(CHAT) and "mail" in str(r.body)]
    assert sent and all(secret not in str(r.body) for r in sent)


def test_capacity_errors_are_retried_until_the_job_completes_and_it_is_charged_once(
    http: httpx.Client, sim: RunningSimulator
) -> None:
    before = spend_micros(http, "alpha")
    sim.faults.set({"status": 503}, count=3)
    accepted = http.post(CHAT, json=question("retry me"), headers={**auth(), **ASYNC})
    done = poll_job(http, accepted.headers["location"], auth())
    assert done.status_code == 200, done.text
    usage = done.json()["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    cost = (usage["prompt_tokens"] - cached) * 1000 + cached * 100 + usage["completion_tokens"] * 2000
    assert spend_micros(http, "alpha") - before == cost


def test_an_error_the_sync_call_would_get_is_the_jobs_result(
    http: httpx.Client, sim: RunningSimulator
) -> None:
    sim.faults.set({"status": 400, "message": "the upstream refuses this"}, count=1)
    accepted = http.post(CHAT, json=question("refuse me"), headers={**auth(), **ASYNC})
    done = poll_job(http, accepted.headers["location"], auth())
    assert openai_error(done, 400)["message"]


def test_a_cancelled_job_never_runs_and_gives_back_its_reservation(
    http: httpx.Client, sim: RunningSimulator, jobs_dir: Path
) -> None:
    sim.faults.set({"status": 503})  # every attempt fails: the job waits in the queue between them
    accepted = http.post(CHAT, json=question("cancel me"), headers={**auth(), **ASYNC})
    location = accepted.headers["location"]
    deadline = time.monotonic() + 30
    while (cancelled := http.delete(location, headers=auth())).status_code == 202:  # claimed right now
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert openai_error(cancelled, 499)["code"] == "job_cancelled"
    sim.faults.clear()
    assert openai_error(http.get(location, headers=auth()), 499)["code"] == "job_cancelled"
    with sqlite3.connect(jobs_dir / "state.db") as db:
        (open_reservations,) = db.execute(
            "SELECT COUNT(*) FROM reservations WHERE tenant = 'alpha' AND state = 'o'"
        ).fetchone()
    assert open_reservations == 0


def test_metrics_show_the_queue_retries_by_cause_and_time_to_completion(
    http: httpx.Client, sim: RunningSimulator
) -> None:
    sim.faults.set({"status": 429, "code": 3040}, count=1)
    accepted = http.post(CHAT, json=question("count me"), headers={**auth(), **ASYNC})
    assert poll_job(http, accepted.headers["location"], auth()).status_code == 200
    page = http.get("/metrics").text
    assert 'tollgate_jobs_retries_total{tollgate_cause="upstream_rate_limited"}' in page
    assert "tollgate_jobs_time_to_completion_seconds_count" in page
    assert 'tollgate_jobs_finished_total{tollgate_state="succeeded"}' in page
    sim.faults.set({"status": 503})  # a job that stays in the queue shows in its depth and age
    waiting = http.post(CHAT, json=question("still waiting"), headers={**auth(), **ASYNC})
    page = http.get("/metrics").text
    depth = [line for line in page.splitlines() if line.startswith("tollgate_jobs_queue_depth{")]
    assert {line.rsplit(" ", 1)[0] for line in depth} == {
        'tollgate_jobs_queue_depth{tollgate_state="queued",tollgate_tenant="alpha"}',
        'tollgate_jobs_queue_depth{tollgate_state="running",tollgate_tenant="alpha"}',
    }
    assert sum(float(line.rsplit(" ", 1)[1]) for line in depth) == 1.0
    assert 'tollgate_jobs_queue_oldest_age_seconds{tollgate_tenant="alpha"}' in page
    sim.faults.clear()
    assert poll_job(http, waiting.headers["location"], auth()).status_code == 200
