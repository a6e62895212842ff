"""Streamed tool-call responses for guard tests, in the shapes real servers send, and the
client-side view of a guarded stream."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.exchange import Endpoint, Exchange
from gateway.policy.decision import Decision
from gateway.ports import Chunk


def exchange_with(
    decision: Decision | None, *, stream: bool = True, body: dict[str, Any] | None = None
) -> Exchange:
    return Exchange(
        request_id="req-test",
        endpoint=Endpoint.CHAT,
        received_at=0.0,
        deadline=60.0,
        headers={},
        raw_body=b"",
        body=body or {},
        stream=stream,
        decision=decision,
    )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def tool_call_stream(
    calls: list[tuple[str, Any]],
    chunk_chars: int,
    *,
    role_in_first_call: bool = False,
    finish_with_last_fragment: bool = False,
    text: str = "",
    usage: bool = True,
) -> list[dict[str, Any]]:
    """Chunk data for a reply making `calls` ((name, arguments)), arguments cut every `chunk_chars`."""
    chunks: list[dict[str, Any]] = []
    if not role_in_first_call:
        chunks.append(_chunk({"role": "assistant", "content": "" if text else None}))
    chunks.extend(_chunk({"content": text[i : i + chunk_chars]}) for i in range(0, len(text), chunk_chars))
    for index, (name, arguments) in enumerate(calls):
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        first: dict[str, Any] = {
            "tool_calls": [
                {
                    "index": index,
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
            ]
        }
        if role_in_first_call and index == 0:
            first = {"role": "assistant", "content": None, **first}
        chunks.append(_chunk(first))
        chunks.extend(
            _chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + chunk_chars]}}]})
            for i in range(0, len(args), chunk_chars)
        )
    if finish_with_last_fragment and calls:
        chunks[-1]["choices"][0]["finish_reason"] = "tool_calls"
    else:
        chunks.append(_chunk({}, "tool_calls"))
    if usage:
        chunks.append(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            }
        )
    return chunks


@dataclass
class ClientView:
    """What an OpenAI client accumulates from the chunks it received."""

    content: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    usage_chunks: int = 0
    chunks: int = 0


def client_view(chunks: list[Chunk]) -> ClientView:
    view = ClientView()
    for chunk in chunks:
        data = orjson.loads(chunk.encoded())  # what goes on the wire
        view.chunks += 1
        if data.get("usage"):
            view.usage_chunks += 1
        for choice in data["choices"]:
            delta = choice["delta"]
            view.content += delta.get("content") or ""
            for call in delta.get("tool_calls") or ():
                index = call["index"]
                # OpenAI clients index calls by position: a gap or a jump breaks them.
                assert index <= len(view.calls), f"tool call index {index} skips ahead"
                if index == len(view.calls):
                    assert call.get("id"), "a call's first delta carries its id"
                    assert call["function"].get("name"), "a call's first delta carries its name"
                    view.calls.append({"id": "", "name": "", "arguments": ""})
                target = view.calls[index]
                target["id"] += call.get("id") or ""
                target["name"] += call["function"].get("name") or ""
                target["arguments"] += call["function"].get("arguments") or ""
            if choice.get("finish_reason"):
                view.finish_reasons.append(choice["finish_reason"])
    return view
