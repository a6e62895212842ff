"""Deciding what the simulated model answers to a chat request, and the non-streamed shape.

Without ``x_sim`` the request itself decides (``tool_choice``, ``n``, ``response_format``,
``stop``, reasoning: see ``simulator.answers``); the text is ``default_reply_tokens`` words
``"tok0 tok1 ..."``. ``x_sim`` (an object at the top level of the request body) overrides that:

- ``reply``: exact reply text; ``echo: true``: the text of the last user message.
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
``finish_reason "length"``; tool calls are never cut. ``n`` repeats an ``x_sim`` answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from simulator import answers
from simulator.answers import BadRequest, text_of
from simulator.profiles import Profile
from simulator.tokens import BYTES_PER_TOKEN, split_words

_EMPTY: dict[str, Any] = {}
# Request fields that can change a plain answer; without them the precomputed default serves.
_CONTRACT_FIELDS = frozenset({"tools", "tool_choice", "response_format", "stop", "n"})
DEFAULT_ARGUMENT_CHUNK_CHARS = 8


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
    reasoning: str | None = None  # thinking text, sent before the content
    reasoning_pieces: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0  # part of completion_tokens
    matched_stop: str | None = None  # the stop sequence that ended the text
    content_deltas: list[bytes] | None = None  # ``pieces`` as serialised deltas, when known


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
            return text_of(message.get("content"))
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
    """Builds the choices of an answer; the default replies are precomputed once."""

    def __init__(self, default_reply_tokens: int) -> None:
        self.default_reply_tokens = default_reply_tokens
        words = [f"tok{i}" if i == 0 else f" tok{i}" for i in range(default_reply_tokens)]
        # _defaults[n] = the first n words, joined and as pieces; shared, never mutated
        self._defaults = [("".join(words[:n]), words[:n]) for n in range(default_reply_tokens + 1)]
        # ... and their stream deltas, serialised once
        deltas = [orjson.dumps({"content": word}) for word in words]
        self._default_deltas = [deltas[:n] for n in range(default_reply_tokens + 1)]
        most = max(answers.REASONING_WORDS.values())
        self._thoughts = [f"think{i}" if i == 0 else f" think{i}" for i in range(most)]

    def reply(
        self,
        body: dict[str, Any],
        x_sim: dict[str, Any],
        messages: list[Any],
        call_prefix: str,
        profile: Profile,
    ) -> list[ChatReply]:
        """The choices answering ``body``; ``call_prefix`` makes tool-call ids unique."""
        cap = _int_field(body, "max_completion_tokens", 0)
        if cap is None:
            cap = _int_field(body, "max_tokens", 0)
        n = answers.choice_count(body)
        chunk_chars = _int_field(x_sim, "chunk_chars", 1) if x_sim else None
        if x_sim and x_sim.get("tool_calls") is not None:
            return [self._tool_reply(x_sim, call_prefix, chunk_chars, messages)] * n
        if x_sim and ("reply" in x_sim or x_sim.get("echo")):
            return [self._text_reply(x_sim, messages, cap, chunk_chars)] * n
        if n == 1 and not profile.reasoning and _CONTRACT_FIELDS.isdisjoint(body):
            return [self._default(cap, chunk_chars)]  # the benchmarks' path: nothing to decide
        plan = answers.plan_tools(body, messages)
        stops = answers.stop_sequences(body)
        thinking = answers.reasoning_words(body) if profile.reasoning else 0
        return [
            self._contract_reply(
                body,
                messages,
                f"{call_prefix}c{i}" if i else call_prefix,
                i,
                plan,
                stops,
                thinking,
                cap,
                chunk_chars,
            )
            for i in range(n)
        ]

    def _default(self, cap: int | None, chunk_chars: int | None) -> ChatReply:
        wanted = self.default_reply_tokens
        n = wanted if cap is None else min(cap, wanted)
        content, pieces = self._defaults[n]
        if chunk_chars is not None:
            return ChatReply(content, slices(content, chunk_chars), "length" if n < wanted else "stop", n)
        finish = "length" if n < wanted else "stop"
        return ChatReply(content, pieces, finish, n, content_deltas=self._default_deltas[n])

    def _text_reply(
        self, x_sim: dict[str, Any], messages: list[Any], cap: int | None, chunk_chars: int | None
    ) -> ChatReply:
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

    def _contract_reply(
        self,
        body: dict[str, Any],
        messages: list[Any],
        call_prefix: str,
        index: int,
        plan: answers.ToolPlan | None,
        stops: list[str],
        thinking: int,
        cap: int | None,
        chunk_chars: int | None,
    ) -> ChatReply:
        rng = answers.request_rng(body, messages, index)
        thought = self._thoughts[: thinking if cap is None else min(thinking, cap)]
        budget = None if cap is None else cap - len(thought)
        reasoning = "".join(thought) if thought else None
        if budget == 0 and thinking:  # the cap ran out while thinking
            return ChatReply(
                "",
                [],
                "length",
                len(thought),
                [],
                DEFAULT_ARGUMENT_CHUNK_CHARS,
                reasoning,
                thought,
                len(thought),
            )
        if plan is not None:
            calls = [
                ToolCall(f"{call_prefix}_{i}", name, answers.arguments_for(schema, rng))
                for i, (name, schema) in enumerate(plan.calls)
            ]
            call_tokens = sum(-(-(len(c.name) + len(c.arguments)) // BYTES_PER_TOKEN) for c in calls)
            return ChatReply(
                None,
                [],
                "tool_calls",
                len(thought) + call_tokens,
                calls,
                chunk_chars or DEFAULT_ARGUMENT_CHUNK_CHARS,
                reasoning,
                thought,
                len(thought),
            )
        text = answers.json_content(body, rng)
        if text is None:
            text = self._defaults[self.default_reply_tokens][0]
        text, matched = answers.cut_at_stop(text, stops)
        words = split_words(text)
        finish = "stop"
        if budget is not None and len(words) > budget:
            words = words[:budget]
            text = "".join(words)
            finish, matched = "length", None
        pieces = words if chunk_chars is None else slices(text, chunk_chars)
        return ChatReply(
            text,
            pieces,
            finish,
            len(thought) + len(words),
            [],
            DEFAULT_ARGUMENT_CHUNK_CHARS,
            reasoning,
            thought,
            len(thought),
            matched,
        )

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


def usage_dict(prompt_tokens: int, cached_tokens: int | None, choices: list[ChatReply]) -> dict[str, Any]:
    """``usage``; ``cached_tokens`` None leaves ``prompt_tokens_details`` out (as servers that do
    not report it)."""
    if len(choices) == 1:  # the common case, without the generators
        completion_tokens, reasoning = choices[0].completion_tokens, choices[0].reasoning_tokens
    else:
        completion_tokens = sum(c.completion_tokens for c in choices)
        reasoning = sum(c.reasoning_tokens for c in choices)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


@dataclass(frozen=True, slots=True)
class Rendering:
    """How a profile and model shape the answer's objects."""

    profile: Profile
    reasoning_field: str = "reasoning"


def choice_extras(reply: ChatReply, rendering: Rendering) -> dict[str, Any]:
    """Per-choice fields only some servers send (vLLM ``stop_reason``, SGLang ``matched_stop``)."""
    extras: dict[str, Any] = {}
    if rendering.profile.stop_reason_field:
        extras["stop_reason"] = reply.matched_stop
    if rendering.profile.matched_stop_field:
        extras["matched_stop"] = reply.matched_stop
    return extras


def message_of(reply: ChatReply, rendering: Rendering) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message[rendering.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return message


def completion_object(
    choices: list[ChatReply],
    completion_id: str,
    created: int,
    model: str,
    usage: dict[str, Any],
    rendering: Rendering,
) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    profile = rendering.profile
    extras = profile.stop_reason_field or profile.matched_stop_field
    rendered = []
    for index, reply in enumerate(choices):
        choice = {
            "index": index,
            "message": message_of(reply, rendering),
            "finish_reason": reply.finish_reason,
            "logprobs": None,
        }
        if extras:
            choice.update(choice_extras(reply, rendering))
        rendered.append(choice)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": rendered,
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
