"""The response guard: placeholders restored, entities masked or the answer cut, in
non-streamed bodies and in streams, in message content and in tool-call arguments.

Streams go through one sliding window per choice's content and one per tool call's
arguments, so each holds back only what a match in progress needs; everything else
goes out in the chunk it arrived in. Held text joins a later chunk of the same choice
(at the latest the one carrying its finish_reason), or a closing chunk at the end.

A text delta followed by others of the same upstream read (`Exchange.more_in_hand`: their
events go out together) is not scanned on its own: its window takes it unscanned and the
chunk is dropped, and the read's last chunk scans it with its own text and carries what is
released. The client gets the same text at the same moment, in fewer events, and a busy
gateway, whose reads bring several chunks each, scans once per read rather than per chunk.

Everything an upstream sends that reaches the client goes through it, error texts included
(`on_error`: an upstream's 400 may quote the request).

Modes (`Decision.redact.response`, else config): placeholders issued for the request
are restored unless the response is `mask` or `block`; with `tokenize`, any other entity in
the answer (one the model wrote itself) is masked; `mask` replaces each entity in
the model's output with its marker; `block` cuts the choice where the first entity
begins and ends it with finish_reason "content_filter".
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from gateway.chunk_shapes import TEXT_FIELDS, argument_delta
from gateway.errors import GatewayError, RedactionFailed
from gateway.exchange import Exchange
from gateway.ports import Chunk
from gateway.redaction.scrub import marker
from gateway.redaction.state import RedactionCounters, RedactionState, StreamState
from gateway.redaction.tokens import PlaceholderFinder, RestoreOrMask
from gateway.redaction.window import Finder, Replacement, SlidingWindow, redact_whole

logger = logging.getLogger("tollgate.redaction")

# Window keys: the names of the texts (`TEXT_FIELDS`), the index for a tool call's arguments.
CONTENT_FILTER = "content_filter"
_ENVELOPE = ("id", "object", "created", "model", "system_fingerprint")


class RedactionGuard:
    def __init__(self, counters: RedactionCounters) -> None:
        self._counters = counters

    def on_response(self, exchange: Exchange, body: dict[str, Any]) -> None:
        state = exchange.redaction
        if state is None or not state.guards_response:
            return
        try:
            for choice in body.get("choices") or ():
                if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                    self._redact_message(state, choice, choice["message"])
        except Exception as exc:
            self._failed(exchange, state, exc)

    def on_chunk(self, exchange: Exchange, chunk: Chunk) -> list[Chunk]:
        state = exchange.redaction
        if state is None or not state.guards_response:
            return [chunk]
        try:
            if exchange.more_in_hand and self._deferred(state, chunk):
                return []
            return self._redact_chunk(state, chunk)
        except Exception as exc:
            self._failed(exchange, state, exc)
            return [chunk, *self._abandoned(state)]

    def on_end(self, exchange: Exchange) -> list[Chunk]:
        state = exchange.redaction
        if state is None or state.stream is None or not state.guards_response:
            return []
        try:
            return self._closing(state.stream, {key: w.flush() for key, w in state.stream.windows.items()})
        except Exception as exc:
            self._failed(exchange, state, exc)
            return self._abandoned(state)

    def on_error(self, exchange: Exchange, error: GatewayError) -> None:
        """An upstream's error text (which may quote the request) gets what content gets."""
        state = exchange.redaction
        if state is None or not state.guards_response or not error.message:
            return
        try:
            error.message, _ = self._whole(state, error.message, in_json=False)
        except Exception as exc:
            self._failed(exchange, state, exc)

    # non-streamed

    def _redact_message(self, state: RedactionState, choice: dict[str, Any], message: dict[str, Any]) -> None:
        _hide_logprobs(choice)
        for position, field in enumerate(TEXT_FIELDS):
            text = message.get(field)
            if isinstance(text, str) and text:
                message[field], stopped = self._whole(state, text, in_json=False)
                if stopped:
                    _drop_after(message, position, whole_message=True)
                    message.pop("tool_calls", None)
                    self._cut(choice)
                    return
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            return
        for position, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(function, dict) and isinstance(arguments, str) and arguments:
                function["arguments"], stopped = self._whole(state, arguments, in_json=True)
                if stopped:
                    del calls[position + 1 :]
                    self._cut(choice)
                    return

    def _whole(self, state: RedactionState, text: str, in_json: bool) -> tuple[str, bool]:
        finder, replacement = self._tools(state, in_json)
        if state.response == "block":
            found = finder.find(text)
            return (text[: found[0].start], True) if found else (text, False)
        return redact_whole(finder, text, replacement), False

    # streamed

    def _deferred(self, state: RedactionState, chunk: Chunk) -> bool:
        """Whether `chunk`, one choice's text or one tool call's arguments and nothing else,
        was taken unscanned by its window (the only window holding unscanned text): the chunk
        is then dropped."""
        plain: tuple[dict[str, Any], int | str, str] | None = chunk.text_delta()
        if plain is None:
            plain = argument_delta(chunk.data)
            if plain is None:
                return False
        choice, key_part, text = plain
        stream = _stream_of(state, chunk.data)
        index = choice.get("index", 0)
        key = (index, key_part)
        deferred = stream.deferred
        if (deferred is not None and deferred != key) or index in stream.stopped:
            return False
        window = stream.windows.get(key)
        if window is None:
            window = self._window(state, stream, index, key_part)
        window.defer(text)
        stream.deferred = key
        return True

    def _redact_chunk(self, state: RedactionState, chunk: Chunk) -> list[Chunk]:
        data = chunk.data
        stream = state.stream
        caught_up: list[Chunk] = []
        if stream is not None and stream.deferred is not None:
            key, stream.deferred = stream.deferred, None
            if not stream.scans_first(data, key):
                caught_up = self._caught_up(stream, key)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            return [*caught_up, chunk] if caught_up else [chunk]
        stream = _stream_of(state, data)
        changed = False
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict):
                changed |= self._redact_delta(state, stream, choice, delta)
        if changed:
            chunk.dirty = True
        return [*caught_up, chunk] if caught_up else [chunk]

    def _caught_up(self, stream: StreamState, key: tuple[int, int | str]) -> list[Chunk]:
        """A chunk of its own, before the one at hand, for what a window took unscanned when
        the read's last chunk does not scan that window itself."""
        window = stream.windows.get(key)
        if window is None:
            return []
        index, part = key
        released = window.push("")
        delta: dict[str, Any] = {}
        if released:
            _append(delta, part, released)
        choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": None}
        if window.stopped:
            self._stop(stream, index, choice, delta, keep_content=True, keep_calls=True)
        if not delta:
            return []
        data = {**stream.envelope, "choices": [choice]}
        return [Chunk(orjson.dumps(data), data)]

    def _redact_delta(
        self, state: RedactionState, stream: StreamState, choice: dict[str, Any], delta: dict[str, Any]
    ) -> bool:
        index = choice.get("index", 0)
        if index in stream.stopped:
            return self._drop(choice, delta)
        changed = _hide_logprobs(choice)
        for position, field in enumerate(TEXT_FIELDS):
            text = delta.get(field)
            if not isinstance(text, str) or not text:
                continue
            window = self._window(state, stream, index, field)
            released = window.push(text)
            if released != text:
                delta[field] = released
                changed = True
            if window.stopped:
                _drop_after(delta, position)
                self._stop(stream, index, choice, delta, keep_content=True)
                return True
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            calls = []
        for position, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if not isinstance(function, dict) or not isinstance(arguments, str) or not arguments:
                continue
            window = self._window(state, stream, index, call.get("index", position))
            released = window.push(arguments)
            if released != arguments:
                function["arguments"] = released
                changed = True
            if window.stopped:
                del calls[position + 1 :]
                self._stop(stream, index, choice, delta, keep_content=True, keep_calls=True)
                return True
        if choice.get("finish_reason") is not None:
            changed |= self._finish(stream, index, choice, delta)
        return changed

    def _finish(self, stream: StreamState, index: int, choice: dict[str, Any], delta: dict[str, Any]) -> bool:
        """The choice ends here: what its windows held goes out in this chunk, before the end."""
        changed = False
        for (owner, key), window in list(stream.windows.items()):
            if owner != index:
                continue
            held = window.flush()
            del stream.windows[(owner, key)]
            if held:
                _append(delta, key, held)
                changed = True
            if window.stopped:
                self._stop(stream, index, choice, delta, keep_content=True, keep_calls=True)
                return True
        return changed

    def _closing(self, stream: StreamState, held: dict[tuple[int, int | str], str]) -> list[Chunk]:
        """One last chunk for what is still held when a stream ends without finish_reason."""
        deltas: dict[int, dict[str, Any]] = {}
        for (index, key), text in held.items():
            if text:
                _append(deltas.setdefault(index, {}), key, text)
        stream.windows.clear()
        stream.deferred = None
        if not deltas:
            return []
        choices = [{"index": i, "delta": d, "finish_reason": None} for i, d in sorted(deltas.items())]
        data = {**stream.envelope, "choices": choices}
        return [Chunk(orjson.dumps(data), data)]

    def _window(
        self, state: RedactionState, stream: StreamState, index: int, key: int | str
    ) -> SlidingWindow:
        window = stream.windows.get((index, key))
        if window is None:
            finder, replacement = self._tools(state, in_json=isinstance(key, int))
            window = SlidingWindow(finder, replacement, stop_at_first=state.response == "block")
            stream.windows[(index, key)] = window
        return window

    def _stop(
        self,
        stream: StreamState,
        index: int,
        choice: dict[str, Any],
        delta: dict[str, Any],
        keep_content: bool = False,
        keep_calls: bool = False,
    ) -> None:
        stream.stopped.add(index)
        self._counters.blocked += 1
        for key in [k for k in stream.windows if k[0] == index]:
            del stream.windows[key]
        if not keep_calls:
            delta.pop("tool_calls", None)
        if not keep_content:
            delta.pop("content", None)
        self._cut(choice)

    def _drop(self, choice: dict[str, Any], delta: dict[str, Any]) -> bool:
        dropped = _hide_logprobs(choice)
        for field in TEXT_FIELDS:
            dropped |= delta.pop(field, None) is not None
        dropped |= delta.pop("tool_calls", None) is not None
        if choice.get("finish_reason") is not None and choice["finish_reason"] != CONTENT_FILTER:
            choice["finish_reason"] = CONTENT_FILTER
            dropped = True
        return dropped

    @staticmethod
    def _cut(choice: dict[str, Any]) -> None:
        # A streamed choice is marked when its finish_reason arrives; a whole message at once.
        if choice.get("finish_reason") is not None or "message" in choice:
            choice["finish_reason"] = CONTENT_FILTER

    # shared

    @staticmethod
    def _tools(state: RedactionState, in_json: bool) -> tuple[Finder, Replacement]:
        vault = state.vault if state.restores else None
        if vault is None:
            return state.detector, marker  # mask, block, and tokenize with nothing issued
        if state.response == "tokenize":  # the model's own values are masked, issued ones restored
            finder = RestoreOrMask(vault, state.detector)
            return finder, finder.replacement(in_json)
        return PlaceholderFinder(vault), vault.restore_in_json if in_json else vault.restore

    def _failed(self, exchange: Exchange, state: RedactionState, exc: Exception) -> None:
        self._counters.failures += 1
        # The exception's text may quote the content: its type only.
        logger.error(
            "response redaction failed",
            extra={
                "request_id": exchange.request_id,
                "error": type(exc).__name__,
                "fail_open": state.fail_open,
            },
        )
        if not state.fail_open:
            raise RedactionFailed(exchange.request_id) from None
        self._counters.failed_open += 1
        state.disabled = True

    def _abandoned(self, state: RedactionState) -> list[Chunk]:
        if state.stream is None:
            return []
        return self._closing(state.stream, {k: w.abandon() for k, w in state.stream.windows.items()})


def _stream_of(state: RedactionState, data: dict[str, Any]) -> StreamState:
    """The answer's stream state, made at its first chunk (whose envelope a closing chunk takes)."""
    if state.stream is None:
        state.stream = StreamState(envelope={k: data[k] for k in _ENVELOPE if k in data})
    return state.stream


def _append(delta: dict[str, Any], key: int | str, text: str) -> None:
    if isinstance(key, str):
        delta[key] = (delta.get(key) or "") + text
        return
    calls = delta.setdefault("tool_calls", [])
    for call in calls:
        if isinstance(call, dict) and call.get("index") == key and isinstance(call.get("function"), dict):
            call["function"]["arguments"] = call["function"].get("arguments", "") + text
            return
    calls.append({"index": key, "function": {"arguments": text}})


def _drop_after(texts: dict[str, Any], position: int, whole_message: bool = False) -> None:
    """The texts after the one `block` cut are withheld (a whole message keeps a null content)."""
    for later in TEXT_FIELDS[position + 1 :]:
        if whole_message and later == "content":
            texts["content"] = None
        else:
            texts.pop(later, None)


def _hide_logprobs(choice: dict[str, Any]) -> bool:
    """Log probabilities spell the answer out token by token, raw: a guarded answer has none."""
    if choice.get("logprobs") is None:
        return False
    choice["logprobs"] = None
    return True
