"""forward: failover between candidates, and how upstream failures reach the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, eventually, openai_error, openai_upstream, recorded
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway

UNAVAILABLE = {"status": 503, "message": "replica overloaded"}


def _answer(client: openai.OpenAI, model: str, stream: bool, request_id: str) -> tuple[str, str]:
    """(upstream model that answered, text) for one chat request."""
    headers = {"x-request-id": request_id}
    if not stream:
        response = client.chat.completions.create(
            model=model, messages=HELLO, extra_headers=headers, extra_body={"x_sim": {"echo": True}}
        )
        return response.model, response.choices[0].message.content or ""
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=HELLO,
            stream=True,
            extra_headers=headers,
            extra_body={"x_sim": {"echo": True}},
        )
    )
    return chunks[0].model, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _attempts(sim: RunningSimulator, request_id: str) -> list[tuple[int, int | None]]:
    return [(r.replica, r.status) for r in recorded(sim, request_id)]


# Failover


@pytest.mark.parametrize("stream", [False, True])
def test_first_candidate_503_the_second_answers(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    upstream.faults.set(UNAVAILABLE, count=1, replica=0)
    assert _answer(client, "failover", stream, request_id) == ("backup-model", "hello")
    assert _attempts(upstream, request_id) == [(0, 503), (1, 200)]
    assert recorded(upstream, request_id)[1].body["model"] == "backup-model"


@pytest.mark.parametrize("stream", [False, True])
def test_first_candidate_down_the_second_answers(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    upstream.faults.down(0)
    assert _answer(client, "failover", stream, request_id) == ("backup-model", "hello")
    assert _attempts(upstream, request_id) == [(1, 200)]


@pytest.mark.parametrize("stream", [False, True])
def test_nothing_listening_the_second_answers(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    assert _answer(client, "dead-first", stream, request_id) == ("backup-model", "hello")
    assert _attempts(upstream, request_id) == [(1, 200)]


def test_preferred_candidate_answers_when_healthy(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    assert _answer(client, "failover", False, request_id) == ("sim-model", "hello")
    assert _attempts(upstream, request_id) == [(0, 200)]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstreams_rejection_fails_over_to_the_next_candidate(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    # e.g. a llama.cpp server refusing a parameter or header that the fallback takes
    upstream.faults.set({"status": 400, "message": "unsupported parameter"}, count=1, replica=0)
    response = http.post(
        "/v1/chat/completions",
        json=chat_body("failover", stream=stream),
        headers={"x-request-id": request_id},
    )
    assert response.status_code == 200
    assert _attempts(upstream, request_id) == [(0, 400), (1, 200)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_rejection_by_every_candidate_is_relayed_as_the_upstreams(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    before = _rejections(http)
    upstream.faults.set({"status": 400, "message": "temperature is out of range"}, count=2)
    response = http.post(
        "/v1/chat/completions",
        json=chat_body("failover", stream=stream),
        headers={"x-request-id": request_id},
    )
    error = openai_error(response, 400)
    assert (
        error["message"] == "Upstream 'backup' rejected the request (HTTP 400): temperature is out of range"
    )
    # Its own type and code: not the gateway's invalid_request_error, so operators can tell.
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_rejected")
    assert _attempts(upstream, request_id) == [(0, 400), (1, 400)]
    # Counted per upstream (and replica), so a server that refuses what others take shows up.
    assert eventually(lambda: _rejections(http) == {k: v + 1 for k, v in before.items()})


def _rejections(http: httpx.Client) -> dict[str, float]:
    counts = dict.fromkeys(("local", "backup"), 0.0)
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name != "tollgate_upstream_attempts_total" or labels["tollgate_upstream"] not in counts:
                continue
            if labels["tollgate_outcome"] == "upstream_rejected":
                counts[labels["tollgate_upstream"]] += sample.value
    return counts


def test_every_candidate_failing_returns_the_last_error(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    upstream.faults.set(UNAVAILABLE)
    response = http.post(
        "/v1/chat/completions", json=chat_body("failover"), headers={"x-request-id": request_id}
    )
    assert openai_error(response, 503)["code"] == "upstream_unavailable"
    assert _attempts(upstream, request_id) == [(0, 503), (1, 503)]


def test_stream_does_not_fail_over_after_its_first_chunk(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    stream = client.chat.completions.create(
        model="failover",
        messages=HELLO,
        stream=True,
        extra_headers={"x-request-id": request_id},
        extra_body={
            "x_sim": {"reply": "one two three four", "fault": {"kind": "disconnect", "after_chunks": 3}}
        },
    )
    received = []
    with pytest.raises(openai.APIError) as caught:
        received.extend(stream)
    assert "".join(c.choices[0].delta.content or "" for c in received) == "one two"
    assert {c.model for c in received} == {"sim-model"}
    assert caught.value.code == "upstream_incomplete"
    assert _attempts(upstream, request_id) == [(0, 200)]


# Upstream failures as the client sees them


def test_nothing_listening_is_503(client: openai.OpenAI, http: httpx.Client) -> None:
    error = openai_error(http.post("/v1/chat/completions", json=chat_body("dead")), 503)
    assert error["code"] == "upstream_unavailable"
    assert error["type"] == "api_error"
    assert "'dead'" in error["message"]
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="dead", messages=HELLO, stream=True)
    assert caught.value.status_code == 503


def test_upstream_429_keeps_retry_after(
    client: openai.OpenAI, http: httpx.Client, upstream: RunningSimulator
) -> None:
    body = chat_body(x_sim={"fault": {"status": 429, "retry_after": 7}})
    response = http.post("/v1/chat/completions", json=body)
    assert openai_error(response, 429)["code"] == "upstream_rate_limited"
    assert response.headers["retry-after"] == "7"
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="chat", messages=HELLO, extra_body={"x_sim": body["x_sim"]})
    assert caught.value.response.headers["retry-after"] == "7"


@pytest.mark.parametrize(
    ("upstream_status", "status", "code"), [(500, 502, "upstream_error"), (503, 503, "upstream_unavailable")]
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_5xx_is_an_upstream_error(
    client: openai.OpenAI,
    http: httpx.Client,
    upstream: RunningSimulator,
    upstream_status: int,
    status: int,
    code: str,
    stream: bool,
) -> None:
    x_sim = {"fault": {"status": upstream_status}}
    error = openai_error(
        http.post("/v1/chat/completions", json=chat_body(stream=stream, x_sim=x_sim)), status
    )
    assert error["code"] == code
    assert error["type"] == "api_error"
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="chat", messages=HELLO, stream=stream, extra_body={"x_sim": x_sim}
        )
    assert caught.value.status_code == status


def test_upstream_400_keeps_the_upstreams_message(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    x_sim = {"fault": {"status": 400, "message": "'top_k' must be below 100"}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="chat", messages=HELLO, extra_body={"x_sim": x_sim})
    assert caught.value.status_code == 400
    assert "'top_k' must be below 100" in caught.value.message
    assert caught.value.type == "upstream_error"  # the upstream's refusal, not the gateway's
    assert caught.value.code == "upstream_rejected"


# Deadlines


def test_slow_first_token_past_first_byte_timeout_is_504(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    x_sim = {"fault": {"kind": "slow_first_token", "delay_s": 10}}
    response = http.post(
        "/v1/chat/completions",
        json=chat_body("impatient", stream=True, x_sim=x_sim),
        headers={"x-request-id": request_id},
    )
    assert openai_error(response, 504)["code"] == "upstream_timeout"
    # The gateway hung up, so the upstream stops working on it.
    assert eventually(lambda: any(r.client_disconnected for r in recorded(upstream, request_id)))


@pytest.mark.parametrize("stream", [False, True])
def test_hang_past_x_request_timeout_is_504(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="chat",
            messages=HELLO,
            stream=stream,
            extra_headers={"x-request-timeout": "0.5", "x-request-id": request_id},
            extra_body={"x_sim": {"fault": {"kind": "hang"}}},
        )
    assert caught.value.status_code == 504
    assert caught.value.code == "upstream_timeout"
    assert eventually(lambda: any(r.client_disconnected for r in recorded(upstream, request_id)))


def test_stream_is_cut_at_the_request_deadline(http: httpx.Client, paced_sim: RunningSimulator) -> None:
    body = chat_body("paced", stream=True, x_sim={"reply": " ".join(["w"] * 40)})  # 2 s of generation
    response = http.post("/v1/chat/completions", json=body, headers={"x-request-timeout": "0.5"})
    assert response.status_code == 200
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] != "[DONE]"
    assert json.loads(events[-1])["error"]["code"] == "upstream_timeout"


@pytest.fixture(scope="module")
def short_deadline(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        server={"request_timeout_s": 0.5},
    )
    with running_gateway(config) as running:
        yield running


@pytest.mark.parametrize(
    "x_sim", [{"fault": {"kind": "hang"}}, {"fault": {"kind": "slow_first_token", "delay_s": 10}}]
)
def test_request_timeout_is_504(
    short_deadline: RunningGateway, upstream: RunningSimulator, x_sim: dict[str, Any]
) -> None:
    response = httpx.post(
        short_deadline.url + "/v1/chat/completions",
        json=chat_body(x_sim=x_sim),
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=10,
    )
    assert openai_error(response, 504)["code"] == "upstream_timeout"
