"""Deciding what the simulated model answers to a chat request, and the non-streamed shape.

``x_sim`` (an object at the top level of the request body) steers the answer:

- ``reply``: exact reply text; ``echo: true``: the text of the last user message; otherwise
  ``default_reply_tokens`` words ``"tok0 tok1 ..."``.
- ``tool_calls: [{"name", "arguments": object|string, "id"?, "echo"?: key}]``: answer with
  exactly those calls (``finish_reason "tool_calls"``); ``tool_reply``: optional text before
  them. With ``echo``, the arguments are ``{key: the text of the last user message}``: a call
  built from what the model was sent, not from what the client wrote in ``x_sim``.
- ``chunk_chars``: stream content (default: one word per chunk) and tool-call arguments
  (default: 8 characters) in slices of this many characters.
- ``fault``: see ``simulator.faults``.
- ``native_shape: true`` (Workers AI ``/ai/run`` only): answer in the older models' native
  shape, ``{"response", "tool_calls": [{"name", "arguments"}], "usage"}``, streamed as
  ``{"response": "..."}`` events, instead of the OpenAI shape Kimi uses.

``max_completion_tokens`` (else ``max_tokens``) caps the text reply, cutting it with
``finish_reason "length"``; tool calls are never cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from simulator.tokens import BYTES_PER_TOKEN, split_words

_EMPTY: dict[str, Any] = {}
DEFAULT_ARGUMENT_CHUNK_CHARS = 8


class BadRequest(ValueError):
    """The request cannot be served; answered with HTTP 400 in the path's error format."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(slots=True)
class ChatReply:
    """The answer, ready to be rendered streamed or not."""

    content: str | None
    pieces: list[str]  # content deltas when streamed
    finish_reason: str
    completion_tokens: int
    tool_calls: list[ToolCall] = field(default_factory=list)
    argument_chunk_chars: int = DEFAULT_ARGUMENT_CHUNK_CHARS


def x_sim_of(body: dict[str, Any]) -> dict[str, Any]:
    """The request's ``x_sim`` object (empty when absent)."""
    x_sim = body.get("x_sim")
    if x_sim is None:
        return _EMPTY
    if not isinstance(x_sim, dict):
        raise BadRequest("x_sim must be an object")
    return x_sim


def messages_of(body: dict[str, Any]) -> list[Any]:
    """The chat messages; a Workers AI native ``prompt`` counts as one user message."""
    messages = body.get("messages")
    if messages is None and isinstance(body.get("prompt"), str):
        return [{"role": "user", "content": body["prompt"]}]
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array")
    return messages


def _int_field(source: dict[str, Any], name: str, minimum: int) -> int | None:
    value = source.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"'{name}' must be an integer >= {minimum}")
    return value


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(
                    part["text"]
                    for part in content
                    if isinstance(part, dict)
                    and part.get("type") == "text"
                    and isinstance(part.get("text"), str)
                )
            return ""
    return ""


def slices(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of ``size`` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def _tool_calls(raw: object, call_prefix: str, messages: list[Any]) -> list[ToolCall]:
    if not isinstance(raw, list):
        raise BadRequest("x_sim.tool_calls must be an array")
    calls: list[ToolCall] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadRequest("each x_sim.tool_calls item needs a string 'name'")
        arguments = item.get("arguments", {})
        echo = item.get("echo")
        if isinstance(echo, str):
            arguments = {echo: _last_user_text(messages)}
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        call_id = item.get("id")
        calls.append(
            ToolCall(call_id if isinstance(call_id, str) else f"{call_prefix}_{i}", item["name"], arguments)
        )
    return calls


class ReplyMaker:
    """Builds ``ChatReply`` objects; the default replies are precomputed once."""

    def __init__(self, default_reply_tokens: int) -> None:
        self.default_reply_tokens = default_reply_tokens
        words = [f"tok{i}" if i == 0 else f" tok{i}" for i in range(default_reply_tokens)]
        # _defaults[n] = the first n words, joined and as pieces; shared, never mutated
        self._defaults = [("".join(words[:n]), words[:n]) for n in range(default_reply_tokens + 1)]

    def reply(
        self, body: dict[str, Any], x_sim: dict[str, Any], messages: list[Any], call_prefix: str
    ) -> ChatReply:
        """Decide the answer to ``body``; ``call_prefix`` makes default tool-call ids unique."""
        cap = _int_field(body, "max_completion_tokens", 0)
        if cap is None:
            cap = _int_field(body, "max_tokens", 0)
        chunk_chars = _int_field(x_sim, "chunk_chars", 1) if x_sim else None
        if x_sim and x_sim.get("tool_calls") is not None:
            return self._tool_reply(x_sim, call_prefix, chunk_chars, messages)
        if not x_sim or ("reply" not in x_sim and not x_sim.get("echo")):
            wanted = self.default_reply_tokens
            n = wanted if cap is None else min(cap, wanted)
            content, pieces = self._defaults[n]
            if chunk_chars is not None:
                pieces = slices(content, chunk_chars)
            return ChatReply(content, pieces, "length" if n < wanted else "stop", n)
        text = x_sim.get("reply")
        if text is None:
            text = _last_user_text(messages)
        elif not isinstance(text, str):
            raise BadRequest("x_sim.reply must be a string")
        words = split_words(text)
        finish = "stop"
        if cap is not None and len(words) > cap:
            words = words[:cap]
            text = "".join(words)
            finish = "length"
        pieces = words if chunk_chars is None else slices(text, chunk_chars)
        return ChatReply(text, pieces, finish, len(words))

    def _tool_reply(
        self, x_sim: dict[str, Any], call_prefix: str, chunk_chars: int | None, messages: list[Any]
    ) -> ChatReply:
        calls = _tool_calls(x_sim["tool_calls"], call_prefix, messages)
        text = x_sim.get("tool_reply")
        if text is not None and not isinstance(text, str):
            raise BadRequest("x_sim.tool_reply must be a string")
        words = split_words(text) if text else []
        pieces = words if chunk_chars is None or not text else slices(text, chunk_chars)
        call_tokens = sum(-(-(len(c.name) + len(c.arguments)) // BYTES_PER_TOKEN) for c in calls)
        return ChatReply(
            content=text or None,
            pieces=pieces,
            finish_reason="tool_calls",
            completion_tokens=len(words) + call_tokens,
            tool_calls=calls,
            argument_chunk_chars=chunk_chars or DEFAULT_ARGUMENT_CHUNK_CHARS,
        )


def usage_dict(prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion_object(
    reply: ChatReply, completion_id: str, created: int, model: str, usage: dict[str, Any]
) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
        "usage": usage,
        "system_fingerprint": "tollgate-sim",
    }


def native_result(reply: ChatReply, usage: dict[str, Any]) -> dict[str, Any]:
    """The older Workers AI models' ``result``: text in ``response``, flat tool calls."""
    result: dict[str, Any] = {"response": reply.content, "usage": usage}
    if reply.tool_calls:
        result["tool_calls"] = [
            {"name": c.name, "arguments": orjson.loads(c.arguments)} for c in reply.tool_calls
        ]
    return result
