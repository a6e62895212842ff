"""Emitted tool calls from a corpus of malicious and benign arguments, through a gateway
deciding with the shipped Rego policy, streamed and not, to the real openai client: every
malicious call is blocked with its reason, every benign one reaches the client intact."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from simulator import RunningSimulator
from tests.harness import openai_upstream
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway

REPO = Path(__file__).parents[2]
POLICY_DATA = """
defaults:
  on_tool_violation: reject
  redact: {request: "off", response: "off", entities: []}
  limits: {max_tokens: 4096}
  soft_budget_max_tokens: 1024
data_classes: {}
tenants:
  alpha:
    models: ["*"]
    tools: ["fetch_url", "read_file"]
    tool_args:
      fetch_url:
        url: {allowed_hosts: ["*.example.com"], allowed_schemes: ["https"], required: true}
      read_file:
        path: {allowed_path_prefixes: ["/srv/data"], required: true}
"""
TOOLS: Any = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("fetch_url", "read_file")
]

# (tool, raw argument text, what the block note must say)
MALICIOUS = [
    ("fetch_url", '{"url": "https://docs.example.com:0/"}', "invalid port"),
    ("fetch_url", '{"url": "https://docs.example.com:65536/"}', "invalid port"),
    ("fetch_url", '{"url": "https://docs.example.com:/"}', "invalid port"),
    ("fetch_url", '{"url": "https://docs.example.com:https/"}', "invalid port"),
    ("fetch_url", '{"url": null}', "is not a string but null"),
    ("fetch_url", '{"url": ["https://docs.example.com/"]}', "is not a string but an array"),
    ("fetch_url", "{}", "required argument 'url' is missing"),
    ("fetch_url", '{"Url": "https://evil.com/"}', "required argument 'url' is missing"),
    ("fetch_url", '{"url": "https://evil.com/", "url": "https://docs.example.com/"}', "repeat the key"),
    ("fetch_url", '{"url": "https://docs.example.com@evil.com/"}', "credentials"),
    ("fetch_url", '{"url": "https://0x7f000001/"}', "is not public"),
    ("fetch_url", '{"url": "https://[::ffff:a9fe:a9fe]/"}', "is not public"),
    ("fetch_url", '{"url": "https://fa\\u00df.example.com/"}', "not a valid host name"),
    ("fetch_url", '{"url": "https://docs.example.com\\u200b/"}', "whitespace"),
    ("fetch_url", '{"url": "HTTP://docs.example.com/"}', "scheme 'http'"),
    ("read_file", '{"path": "/srv/data/%252e%252e/secrets"}', "'..' segment"),
    ("read_file", '{"path": "/srv/data/..;/secrets"}', "'..' segment"),
    ("read_file", '{"path": null}', "is not a string but null"),
    ("read_file", '{"path": ["/srv/data/a"]}', "is not a string but an array"),
    ("read_file", '{"file": "/etc/passwd"}', "required argument 'path' is missing"),
]
BENIGN = [
    ("fetch_url", '{"url": "https://docs.example.com:443/a"}'),
    ("fetch_url", '{"url": "HTTPS://Docs.Example.com./a"}'),
    ("fetch_url", '{"url": "https://xn--mnchen-3ya.example.com/"}'),
    ("read_file", '{"path": "/srv/data/./reports/q3.csv"}'),
    ("read_file", '{"path": "/srv/./data/reports/q3.csv"}'),
]


def _policy_dir(tmp: Path) -> Path:
    directory = tmp / "policies"
    directory.mkdir()
    shutil.copy(REPO / "policies" / "authz.rego", directory / "authz.rego")
    (directory / "data.yaml").write_text(POLICY_DATA)
    return directory


@pytest.fixture(scope="module")
def guarded(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        policy={"dir": str(_policy_dir(tmp_path_factory.mktemp("corpus")))},
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def oai(guarded: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=guarded.base_url, api_key=TEST_KEY, max_retries=0) as client:
        yield client


def _calls(items: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"id": f"call_{i}", "name": name, "arguments": text} for i, (name, text) in enumerate(items)]


def _streamed(oai: openai.OpenAI, calls: list[dict[str, Any]], chunk_chars: int) -> tuple[list[Any], str]:
    stream = oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        stream=True,
        extra_body={"x_sim": {"tool_calls": calls, "chunk_chars": chunk_chars}},
    )
    got: dict[int, dict[str, str]] = {}
    content = ""
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                call = got.setdefault(delta.index, {"name": "", "arguments": ""})
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    return [got[i] for i in sorted(got)], content


@pytest.mark.parametrize(("tool", "arguments", "reason"), MALICIOUS)
def test_a_malicious_call_is_blocked_non_streamed(
    oai: openai.OpenAI, upstream: RunningSimulator, tool: str, arguments: str, reason: str
) -> None:
    completion = oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        extra_body={"x_sim": {"tool_calls": _calls([(tool, arguments)])}},
    )
    [choice] = completion.choices
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "content_filter"
    note = choice.message.content or ""
    assert note.startswith(f"[tollgate] tool call '{tool}' blocked by policy: ")
    assert reason in note


@pytest.mark.parametrize("chunk_chars", [1, 7, 1000])
def test_the_malicious_corpus_is_blocked_streamed(
    oai: openai.OpenAI, upstream: RunningSimulator, chunk_chars: int
) -> None:
    calls, content = _streamed(oai, _calls([(t, a) for t, a, _ in MALICIOUS]), chunk_chars)
    assert calls == []
    notes = content.strip().split("\n")
    assert len(notes) == len(MALICIOUS)
    for note, (tool, _, reason) in zip(notes, MALICIOUS, strict=True):
        assert note.startswith(f"[tollgate] tool call '{tool}' blocked by policy: ")
        assert reason in note, note


def test_the_benign_corpus_passes_non_streamed(oai: openai.OpenAI, upstream: RunningSimulator) -> None:
    completion = oai.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        extra_body={"x_sim": {"tool_calls": _calls(BENIGN)}},
    )
    [choice] = completion.choices
    got = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or ()]
    assert got == [(name, json.loads(text)) for name, text in BENIGN]
    assert "[tollgate]" not in (choice.message.content or "")


@pytest.mark.parametrize("chunk_chars", [1, 7, 1000])
def test_the_benign_corpus_passes_streamed(
    oai: openai.OpenAI, upstream: RunningSimulator, chunk_chars: int
) -> None:
    calls, content = _streamed(oai, _calls(BENIGN), chunk_chars)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        (name, json.loads(text)) for name, text in BENIGN
    ]
    assert "[tollgate]" not in content
