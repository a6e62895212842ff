"""The tool-call guard's state for one streamed response.

Per choice, each tool call (by its upstream `index`) is in one of these states:

    passing   allowed, no argument constraints: its deltas flow on as they arrive
    held      its arguments must be checked (or its name has not arrived, or may still
              grow into another allowed name): deltas are buffered until the call is
              complete, i.e. the next call starts, the choice finishes or the stream
              ends; then it is released as one delta, or blocked
    released  checked and sent
    blocked   dropped; the client gets a content delta explaining why

Calls the client sees are renumbered densely in the order they are sent, so its
accumulator never meets a gap. When every call of a choice was blocked, its
finish_reason becomes "content_filter". Fragments of a call that arrive after its
verdict (a server interleaving several calls) are dropped: the guard never lets
unchecked argument text through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from gateway.policy.decision import Decision
from gateway.ports import Chunk
from gateway.tools.call_check import BlockedCall, check_call, needs_argument_check, tool_refusal

CallState = Literal["passing", "held", "released", "blocked"]
_ENVELOPE_KEYS = ("id", "object", "created", "model", "system_fingerprint")


@dataclass(slots=True)
class _Call:
    state: CallState
    name: str = ""
    id: str | None = None
    type: str = "function"
    arguments: list[str] = field(default_factory=list)  # held fragments
    out_index: int = -1


@dataclass(slots=True)
class _Choice:
    calls: dict[int, _Call] = field(default_factory=dict)
    latest: int | None = None
    sent: int = 0  # calls shown to the client; the next one gets this index
    blocked: int = 0
    content_seen: bool = False
    legacy_blocked: bool = False


class ToolCallStream:
    def __init__(self, decision: Decision) -> None:
        self._decision = decision
        self._blocked: list[BlockedCall] = []
        self._choices: dict[int, _Choice] = {}
        self._envelope: dict[str, Any] = {"object": "chat.completion.chunk"}

    def feed(self, chunk: Chunk) -> list[Chunk]:
        """The chunks to send for `chunk`: released calls and notes first, then the chunk
        itself unless nothing is left of it."""
        data = chunk.data
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            return [chunk]
        before: list[Chunk] = []
        emptied = 0
        enveloped = False
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            state = self._choices.get(index)
            if state is None:
                state = self._choices[index] = _Choice()
            delta = choice.get("delta")
            touched = isinstance(delta, dict) and ("tool_calls" in delta or "function_call" in delta)
            if not enveloped and (touched or choice.get("finish_reason") is not None):
                # Only a chunk with calls or an end can make the guard send chunks of its own
                # (now, or at the stream's end): they take its envelope, the others need none.
                self._envelope = {k: data[k] for k in _ENVELOPE_KEYS if k in data}
                enveloped = True
            if isinstance(delta, dict):
                if delta.get("content"):
                    state.content_seen = True
                if touched and self._filter_delta(index, state, delta, before):
                    chunk.dirty = True
            if choice.get("finish_reason") is not None:
                self._settle(index, state, before)
                if state.blocked and not state.sent:
                    choice["finish_reason"] = "content_filter"
                    chunk.dirty = True
            elif touched and not delta:
                emptied += 1
        if emptied == len(choices) and data.get("usage") is None:
            return before
        return [*before, chunk]

    def end(self) -> list[Chunk]:
        """Calls still held when the stream ends: released or blocked now."""
        out: list[Chunk] = []
        for index, state in self._choices.items():
            self._settle(index, state, out)
        return out

    def take_blocked(self) -> list[BlockedCall]:
        """Calls blocked since the last look."""
        blocked, self._blocked = self._blocked, []
        return blocked

    def _filter_delta(
        self, choice_index: int, state: _Choice, delta: dict[str, Any], out: list[Chunk]
    ) -> bool:
        """Drop or renumber the delta's tool calls; True when anything changed."""
        legacy = delta.pop("function_call", None)
        if legacy is not None and not state.legacy_blocked:
            # Legacy function calls are not checked (the request guard refuses `functions`).
            state.legacy_blocked = True
            name = legacy.get("name") if isinstance(legacy, dict) else None
            call = _Call("held", name=name if isinstance(name, str) else "function_call")
            self._block(choice_index, state, call, "legacy function_call responses are not allowed", out)
        raw = delta.get("tool_calls")
        changed = legacy is not None or not isinstance(raw, list)
        kept: list[dict[str, Any]] = []
        for item in _list(raw):
            sent_as = item.get("index") if isinstance(item, dict) else None
            passed = self._tool_delta(choice_index, state, item, out)
            if passed is None:
                changed = True
            else:
                kept.append(passed)
                changed = changed or passed["index"] != sent_as
        if changed:
            if kept:
                delta["tool_calls"] = kept
            else:
                delta.pop("tool_calls", None)
        return changed

    def _tool_delta(
        self, choice_index: int, state: _Choice, delta: Any, out: list[Chunk]
    ) -> dict[str, Any] | None:
        if not isinstance(delta, dict):
            return None
        function = delta.get("function")
        function = function if isinstance(function, dict) else {}
        name = function.get("name")
        name_part = name if isinstance(name, str) else ""
        arguments_part = function.get("arguments")
        arguments_part = arguments_part if isinstance(arguments_part, str) else ""
        index = _call_index(delta, state)
        call = state.calls.get(index)
        if call is None:
            self._settle(choice_index, state, out)  # a new call: the earlier ones are complete
            call = self._start(choice_index, state, index, name_part, out)
            name_part = ""
        if call.state in ("blocked", "released"):
            return None
        if isinstance(delta.get("id"), str) and call.id is None:
            call.id = delta["id"]
        if name_part:
            if call.state == "passing":
                self._block(choice_index, state, call, "the tool name changed after the call began", out)
                return None
            call.name += name_part
        if call.state == "held":
            call.arguments.append(arguments_part)
            return None
        delta["index"] = call.out_index
        return delta

    def _start(self, choice_index: int, state: _Choice, index: int, name: str, out: list[Chunk]) -> _Call:
        state.latest = index
        call = _Call("held", name=name)
        state.calls[index] = call
        if not name or _may_grow(self._decision, name):
            return call  # judged when complete, once its whole name is known
        refusal = tool_refusal(self._decision, name)
        if refusal is not None:
            self._block(choice_index, state, call, refusal, out)
        elif not needs_argument_check(self._decision, name):
            call.state, call.out_index = "passing", state.sent
            state.sent += 1
        return call

    def _settle(self, choice_index: int, state: _Choice, out: list[Chunk]) -> None:
        for call in state.calls.values():
            if call.state != "held":
                continue
            arguments = "".join(call.arguments)
            reason = check_call(self._decision, call.name, arguments)
            if reason is not None:
                self._block(choice_index, state, call, reason, out)
                continue
            call.state, call.out_index = "released", state.sent
            state.sent += 1
            released: dict[str, Any] = {"index": call.out_index, "type": call.type}
            if call.id is not None:
                released["id"] = call.id
            released["function"] = {"name": call.name, "arguments": arguments}
            out.append(self._chunk(choice_index, {"tool_calls": [released]}))
            call.arguments.clear()

    def _block(self, choice_index: int, state: _Choice, call: _Call, reason: str, out: list[Chunk]) -> None:
        call.state = "blocked"
        call.arguments.clear()
        state.blocked += 1
        blocked = BlockedCall(call.name, reason)
        self._blocked.append(blocked)
        note = ("\n" if state.content_seen else "") + blocked.note()
        state.content_seen = True
        out.append(self._chunk(choice_index, {"content": note}))

    def _chunk(self, choice_index: int, delta: dict[str, Any]) -> Chunk:
        data = {**self._envelope, "choices": [{"index": choice_index, "delta": delta, "finish_reason": None}]}
        return Chunk(orjson.dumps(data), data)


def _may_grow(decision: Decision, name: str) -> bool:
    """Whether `name` may be the first part of a longer allowed name (servers that stream
    names in pieces): judging it now would block a good call or pass a bad one."""
    return any(allowed != name and allowed.startswith(name) for allowed in decision.tools.allowed)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _call_index(delta: dict[str, Any], state: _Choice) -> int:
    index = delta.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    # No index (some servers omit it): a delta with a new id starts a call, anything else
    # continues the latest one.
    call_id = delta.get("id")
    latest = state.calls.get(state.latest) if state.latest is not None else None
    if latest is None or (isinstance(call_id, str) and call_id and call_id != latest.id):
        return max(state.calls, default=-1) + 1
    return state.latest if state.latest is not None else 0
