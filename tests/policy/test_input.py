"""The input document: low-cardinality facts only, canonical, request id outside the key."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import InvalidRequest
from gateway.exchange import Endpoint, Exchange, Principal, Tenant
from gateway.policy.input import build_input

PRINCIPAL = Principal(Tenant("demo"), "k-0123456789ab", "ci")


def exchange(
    body: dict[str, Any], *, endpoint: Endpoint = Endpoint.CHAT, request_id: str = "req-1", **kw: Any
) -> Exchange:
    ex = Exchange(
        request_id=request_id,
        endpoint=endpoint,
        received_at=0.0,
        deadline=30.0,
        headers=kw.pop("headers", {}),
        raw_body=b"",
        body=body,
        principal=PRINCIPAL,
        model_alias=body["model"],
        stream=body.get("stream") is True,
        **kw,
    )
    return ex


def test_a_chat_request_becomes_its_facts() -> None:
    body = {
        "model": "kimi-k2.6",
        "stream": True,
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {}},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "content": "x" * 8000},
        ],
        "tools": [
            {"type": "function", "function": {"name": "search"}},
            {"type": "function", "function": {"name": "fetch_url"}},
            {"type": "function", "function": {"name": "search"}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "search"}},
        "response_format": {"type": "json_object"},
    }
    doc = build_input(
        exchange(
            body,
            session_key="s",
            headers={"x-data-class": "Confidential"},
            workflow="extraction",
            priority="background",
        ),
        ["local", "workers-ai", "local"],
    ).document
    assert doc == {
        "tenant": "demo",
        "key": {"id": "k-0123456789ab", "label": "ci"},
        "endpoint": "chat.completions",
        "api": "chat.completions",
        "model": "kimi-k2.6",
        "upstreams": ["local", "workers-ai"],
        "tools": ["fetch_url", "search"],
        "tool_choice": "named",
        "tool_choice_name": "search",
        "stream": True,
        "response_format": "json_object",
        "has_images": True,
        "message_roles": ["assistant", "system", "tool", "user"],
        "messages": "4-7",
        "prompt_tokens": "1k-4k",
        "session": True,
        "session_state": {"turns": "0", "tokens": "0", "spend": "0", "growth": "0"},
        "budget": "ok",
        "data_class": "confidential",
        "workflow": "extraction",
        "priority": "background",
        "async": False,
        "capacity": "ok",
        "request_id": "req-1",
    }


def test_an_async_job_and_a_throttled_upstream_are_facts_of_their_own() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    sync = build_input(exchange(body), ["local"])
    job = build_input(exchange(body, job_id="job_1"), ["local"], capacity="throttled")
    assert (sync.document["async"], sync.document["capacity"]) == (False, "ok")
    assert (job.document["async"], job.document["capacity"]) == (True, "throttled")
    assert job.cache_key != sync.cache_key
    assert b"job_1" not in job.cache_key  # the job's id stays out: jobs of one shape share a decision


def test_no_message_text_reaches_the_document() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "my card is 4111 1111 1111 1111"}]}
    built = build_input(exchange(body), ["local"])
    assert b"4111" not in orjson.dumps(built.document)
    assert b"4111" not in built.cache_key


def test_the_cache_key_leaves_out_the_request_id_and_is_canonical() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": "b"}},
            {"type": "function", "function": {"name": "a"}},
        ],
    }
    reordered = {**body, "tools": list(reversed(body["tools"]))}
    first = build_input(exchange(body, request_id="one"), ["local"])
    second = build_input(exchange(reordered, request_id="two"), ["local"])
    assert first.cache_key == second.cache_key
    assert first.document["request_id"] == "one"
    assert b"request_id" not in first.cache_key
    assert first.cache_key == orjson.dumps(orjson.loads(first.cache_key), option=orjson.OPT_SORT_KEYS)


def test_requests_of_a_different_shape_get_a_different_key() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    key = build_input(exchange(base), ["local"]).cache_key
    assert build_input(exchange({**base, "stream": True}), ["local"]).cache_key != key
    assert build_input(exchange({**base, "model": "other"}), ["local"]).cache_key != key
    long = {**base, "messages": [{"role": "user", "content": "x" * 50_000}]}
    assert build_input(exchange(long), ["local"]).cache_key != key


@pytest.mark.parametrize(
    ("count", "band"),
    [(1, "1"), (2, "2-3"), (3, "2-3"), (4, "4-7"), (15, "8-15"), (16, "16-31"), (400, "32+")],
)
def test_message_counts_are_banded(count: int, band: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * count}
    assert build_input(exchange(body), ["local"]).document["messages"] == band


def test_an_embeddings_request_has_no_chat_facts() -> None:
    body = {"model": "embed", "input": ["a" * 6000, "b"]}
    doc = build_input(exchange(body, endpoint=Endpoint.EMBEDDINGS), ["local"]).document
    assert doc["endpoint"] == "embeddings"
    assert (doc["tools"], doc["tool_choice"], doc["message_roles"], doc["messages"]) == ([], None, [], "0")
    assert doc["prompt_tokens"] == "1k-4k"


@pytest.mark.parametrize("label", ["", "has space", "x" * 65, "../etc", "é"])
def test_a_malformed_data_class_header_is_a_clear_400(label: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(InvalidRequest) as caught:
        build_input(exchange(body, headers={"x-data-class": label}), ["local"])
    assert caught.value.status == 400
    assert "x-data-class" in caught.value.message


@pytest.mark.parametrize(("tool_output", "band"), [(2_000, "1k-4k"), (1_999, "<1k")])
def test_prompt_tokens_count_the_texts_of_every_message_shape(tool_output: int, band: str) -> None:
    """Text contents and text parts count, at 4 characters a token; an image's URL and a
    tool call's arguments do not (4,000 characters: 1,000 tokens, the next band; 3,999: 999)."""
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s" * 1_000},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "u" * 1_000},
                    {"type": "image_url", "image_url": {"url": "https://images.example.com/" + "a" * 5_000}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "z" * 5_000}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "t" * tool_output},
        ],
    }
    assert build_input(exchange(body), ["local"]).document["prompt_tokens"] == band
