"""The Workers AI adapter against the simulator's /client/v4 endpoint: both APIs, session
affinity, rejectIfBusy, and the mapping of Workers AI error codes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from adapters.upstream.workers_ai import error_for_code
from gateway.errors import UpstreamRejected, UpstreamUnavailable
from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, openai_error, openai_upstream, recorded
from tests.servers import (
    OTHER_TENANT_KEY,
    TEST_KEY,
    UPSTREAM_KEY,
    RunningGateway,
    gateway_config,
    running_gateway,
)

ACCOUNT = "acct-0123"
KIMI = "@cf/moonshotai/kimi-k2.6"
BGE = "@cf/baai/bge-large-en-v1.5"
OPENAI_PREFIX = f"/client/v4/accounts/{ACCOUNT}/ai/v1"
RUN_PREFIX = f"/client/v4/accounts/{ACCOUNT}/ai/run/"


@pytest.fixture(scope="module")
def wai_gateway(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    def workers_ai(**extra: Any) -> dict[str, Any]:
        return {
            "kind": "workers_ai",
            "account_id": ACCOUNT,
            "api_token": UPSTREAM_KEY,
            "base_url": upstream_sim.workers_ai_base_url,
            **extra,
        }

    config = gateway_config(
        upstreams={
            "wai": workers_ai(),
            "wai-native": workers_ai(api="native"),
            "wai-busy": workers_ai(reject_if_busy=True),
            "backup": openai_upstream(upstream_sim.openai_base_url(1)),
        },
        models={
            "kimi": [{"upstream": "wai", "model": KIMI}],
            "kimi-native": [{"upstream": "wai-native", "model": KIMI}],
            "bge": [{"upstream": "wai", "model": BGE}],
            "bge-native": [{"upstream": "wai-native", "model": BGE}],
            "kimi-busy": [{"upstream": "wai-busy", "model": KIMI}],
            "kimi-failover": [
                {"upstream": "wai", "model": KIMI},
                {"upstream": "backup", "model": "backup-model"},
            ],
        },
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def wai(wai_gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=wai_gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai:
        yield oai


@pytest.fixture(scope="module")
def wai_http(wai_gateway: RunningGateway) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=wai_gateway.url, headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30
    ) as raw:
        yield raw


PATHS = {"kimi": OPENAI_PREFIX + "/chat/completions", "kimi-native": RUN_PREFIX + KIMI}


@pytest.mark.parametrize("alias", ["kimi", "kimi-native"])
def test_chat(wai: openai.OpenAI, upstream: RunningSimulator, request_id: str, alias: str) -> None:
    response = wai.chat.completions.create(
        model=alias,
        messages=HELLO,
        extra_headers={"x-request-id": request_id},
        extra_body={"x_sim": {"reply": "Workers answer."}},
    )
    assert response.choices[0].message.content == "Workers answer."
    assert response.choices[0].finish_reason == "stop"
    assert response.usage is not None
    assert response.usage.completion_tokens == 2
    [attempt] = recorded(upstream, request_id)
    assert attempt.path == PATHS[alias]
    assert attempt.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert attempt.body.get("model") == (
        KIMI if alias == "kimi" else None
    )  # native: the model is in the path
    assert attempt.workers_ai_replica is not None


@pytest.mark.parametrize("alias", ["kimi", "kimi-native"])
def test_chat_stream(wai: openai.OpenAI, upstream: RunningSimulator, request_id: str, alias: str) -> None:
    chunks = list(
        wai.chat.completions.create(
            model=alias,
            messages=HELLO,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-request-id": request_id},
            extra_body={"x_sim": {"reply": "streamed from workers"}},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed from workers"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    [attempt] = recorded(upstream, request_id)
    assert attempt.path == PATHS[alias]
    assert attempt.headers["accept"] == "text/event-stream"
    assert attempt.body["stream"] is True


@pytest.mark.parametrize(
    ("alias", "path"), [("bge", OPENAI_PREFIX + "/embeddings"), ("bge-native", RUN_PREFIX + BGE)]
)
def test_embeddings(
    wai: openai.OpenAI, upstream: RunningSimulator, request_id: str, alias: str, path: str
) -> None:
    response = wai.embeddings.create(
        model=alias, input=["one", "two"], encoding_format="float", extra_headers={"x-request-id": request_id}
    )
    assert [d.index for d in response.data] == [0, 1]
    assert [len(d.embedding) for d in response.data] == [8, 8]
    assert response.data[0].embedding != response.data[1].embedding
    assert response.model == BGE
    [attempt] = recorded(upstream, request_id)
    assert attempt.path == path
    if alias == "bge-native":
        assert attempt.body == {"text": ["one", "two"]}
        assert response.usage.prompt_tokens == 0  # the native answer reports none
    else:
        assert attempt.body == {"model": BGE, "input": ["one", "two"], "encoding_format": "float"}
        assert response.usage.prompt_tokens > 0


def test_native_embeddings_match_openai_api_embeddings(
    wai: openai.OpenAI, upstream: RunningSimulator
) -> None:
    via_openai = wai.embeddings.create(model="bge", input="same text", encoding_format="float")
    via_native = wai.embeddings.create(model="bge-native", input="same text")
    assert via_native.data[0].embedding == via_openai.data[0].embedding


def _affinity(http: httpx.Client, sim: RunningSimulator, request_id: str, **headers: str) -> str | None:
    response = http.post(
        "/v1/chat/completions", json=chat_body("kimi"), headers={"x-request-id": request_id, **headers}
    )
    assert response.status_code == 200
    [attempt] = recorded(sim, request_id)
    return attempt.headers.get("x-session-affinity")


def test_session_affinity(wai_http: httpx.Client, upstream: RunningSimulator, request_id: str) -> None:
    by_affinity = _affinity(wai_http, upstream, request_id + "-1", **{"x-session-affinity": "conv-7"})
    by_session_id = _affinity(wai_http, upstream, request_id + "-2", **{"x-session-id": "conv-7"})
    other_tenant = _affinity(
        wai_http,
        upstream,
        request_id + "-3",
        **{"x-session-id": "conv-7", "authorization": f"Bearer {OTHER_TENANT_KEY}"},
    )
    assert by_affinity is not None
    assert re.fullmatch(r"[0-9a-f]{32}", by_affinity)
    assert by_session_id == by_affinity
    assert other_tenant is not None
    assert re.fullmatch(r"[0-9a-f]{32}", other_tenant)
    assert other_tenant != by_affinity
    # Without a session header, the conversation's opening (its prompt family) is the key.
    family = _affinity(wai_http, upstream, request_id + "-4")
    assert family is not None
    assert re.fullmatch(r"[0-9a-f]{32}", family)
    assert family not in (by_affinity, other_tenant)


def test_reject_if_busy_sets_the_option(
    wai_http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    body = chat_body("kimi-busy", options={"seed": 1})
    assert (
        wai_http.post("/v1/chat/completions", json=body, headers={"x-request-id": request_id}).status_code
        == 200
    )
    assert (
        wai_http.post(
            "/v1/chat/completions", json=chat_body("kimi"), headers={"x-request-id": request_id + "-plain"}
        ).status_code
        == 200
    )
    [busy] = recorded(upstream, request_id)
    assert busy.body["options"] == {"seed": 1, "rejectIfBusy": True}
    [plain] = recorded(upstream, request_id + "-plain")
    assert "options" not in plain.body


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        ({"status": 429, "code": 3040}, 503, "upstream_overloaded"),
        ({"status": 429, "code": 3036}, 503, "upstream_quota_exhausted"),
        ({"status": 403, "code": 5035}, 502, "upstream_plan_required"),
        ({"status": 408, "code": 3007}, 504, "upstream_timeout"),
        ({"status": 413, "code": 3006}, 413, "upstream_rejected"),
        ({"status": 429, "code": 3021}, 429, "upstream_rate_limited"),
    ],
)
@pytest.mark.parametrize("alias", ["kimi", "kimi-native"])
@pytest.mark.parametrize("stream", [False, True])
def test_error_codes(
    wai_http: httpx.Client,
    upstream: RunningSimulator,
    fault: dict[str, Any],
    status: int,
    code: str,
    alias: str,
    stream: bool,
) -> None:
    body = chat_body(alias, stream=stream, x_sim={"fault": fault})
    error = openai_error(wai_http.post("/v1/chat/completions", json=body), status)
    assert error["code"] == code
    assert f"({fault['code']}" in error["message"]


@pytest.mark.parametrize("alias", ["kimi", "kimi-native"])
def test_unknown_codes_fall_back_to_the_http_status(
    wai_http: httpx.Client, upstream: RunningSimulator, alias: str
) -> None:
    rejected = chat_body(alias, x_sim={"fault": {"status": 400, "code": 9999, "message": "prompt too odd"}})
    error = openai_error(wai_http.post("/v1/chat/completions", json=rejected), 400)
    assert error["code"] == "upstream_rejected"
    assert "prompt too odd" in error["message"]
    failed = chat_body(alias, x_sim={"fault": {"status": 500, "code": 9999}})
    assert openai_error(wai_http.post("/v1/chat/completions", json=failed), 502)["code"] == "upstream_error"


def test_overloaded_keeps_retry_after(wai_http: httpx.Client, upstream: RunningSimulator) -> None:
    body = chat_body("kimi", x_sim={"fault": {"status": 429, "code": 3040, "retry_after": 3}})
    response = wai_http.post("/v1/chat/completions", json=body)
    assert openai_error(response, 503)["code"] == "upstream_overloaded"
    assert response.headers["retry-after"] == "3"


@pytest.mark.parametrize("stream", [False, True])
def test_overloaded_fails_over(
    wai: openai.OpenAI, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    upstream.faults.set({"status": 429, "code": 3040}, count=1, replica=0)
    response: Any = wai.chat.completions.create(
        model="kimi-failover", messages=HELLO, stream=stream, extra_headers={"x-request-id": request_id}
    )
    models = {chunk.model for chunk in response} if stream else {response.model}
    assert models == {"backup-model"}
    assert [(r.path, r.status) for r in recorded(upstream, request_id)] == [
        (OPENAI_PREFIX + "/chat/completions", 429),
        ("/v1/chat/completions", 200),
    ]


# The code table itself.


@pytest.mark.parametrize(
    ("code", "status", "error_code", "retryable"),
    [
        (3040, 503, "upstream_overloaded", True),
        (3021, 429, "upstream_rate_limited", True),
        (3036, 503, "upstream_quota_exhausted", False),
        (4006, 503, "upstream_quota_exhausted", False),
        (5035, 502, "upstream_plan_required", False),
        (3007, 504, "upstream_timeout", True),
        (3008, 504, "upstream_timeout", True),
        (3046, 504, "upstream_timeout", True),
        (5007, 502, "upstream_not_found", False),
        (3042, 502, "upstream_not_found", False),
        (3006, 413, "upstream_rejected", False),
        (3003, 400, "upstream_rejected", False),
        (5004, 400, "upstream_rejected", False),
        (5016, 502, "upstream_forbidden", False),
        (3041, 502, "upstream_forbidden", False),
    ],
)
def test_error_for_code(code: int, status: int, error_code: str, retryable: bool) -> None:
    error = error_for_code("wai", code, "detail", None)
    assert error is not None
    assert (error.status, error.code, error.retryable) == (status, error_code, retryable)
    assert error.upstream == "wai"
    assert f"({code}: detail)" in error.message


def test_error_for_code_client_faults_and_retry_after() -> None:
    assert isinstance(error_for_code("wai", 3006, "", None), UpstreamRejected)
    overloaded = error_for_code("wai", 3040, "", 2.4)
    assert isinstance(overloaded, UpstreamUnavailable)
    assert overloaded.headers == {"retry-after": "2"}
    assert error_for_code("wai", 1234, "unknown", None) is None


def test_readyz_probes_workers_ai(wai_gateway: RunningGateway, upstream: RunningSimulator) -> None:
    report = httpx.get(wai_gateway.url + "/readyz", timeout=10).json()
    assert report["upstreams"] == {"wai": "up", "wai-native": "up", "wai-busy": "up", "backup": "up"}
    assert report["replicas"]["wai"] == [
        {"replica": 0, "health": "up", "circuit": "closed", "in_flight": 0, "last_probe": None}
    ]
    probes = [r for r in upstream.requests if r.path == f"/client/v4/accounts/{ACCOUNT}/ai/models/search"]
    assert len(probes) == 3
    assert {r.headers["authorization"] for r in probes} == {f"Bearer {UPSTREAM_KEY}"}


def test_native_shape_answer_becomes_a_chat_completion(wai: openai.OpenAI) -> None:
    """Older Workers AI models answer {"response", "tool_calls": [{name, arguments}]}."""
    completion = wai.chat.completions.create(
        model="kimi-native",
        messages=HELLO,
        extra_body={
            "x_sim": {"native_shape": True, "tool_calls": [{"name": "lookup", "arguments": {"q": 1}}]}
        },
    )
    call = completion.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("lookup", '{"q":1}')
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None and completion.usage.completion_tokens > 0


def test_native_shape_stream_gets_text_and_a_finish_reason(wai: openai.OpenAI) -> None:
    stream = wai.chat.completions.create(
        model="kimi-native",
        messages=HELLO,
        stream=True,
        extra_body={"x_sim": {"native_shape": True, "reply": "alpha beta gamma"}},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "alpha beta gamma"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert all(c.usage is None for c in chunks)  # not asked for: hidden
