"""A streamed chunk (`Chunk`), and the shapes of one that the response guards take a shorter
way for: one choice's text, or one tool call's argument text, and nothing else
(`Chunk.text_delta`, and the redaction guard's scan per upstream read). Compiled with the
request path: every chunk of every stream is one (`gateway.ports` names it for the adapters)."""

from __future__ import annotations

from typing import Any

import orjson

TEXT_FIELDS = ("reasoning_content", "reasoning", "content", "refusal")
"""The texts of a message or a delta, in the order a model writes them: reasoning (vLLM and
SGLang reasoning parsers, DeepSeek, Kimi), the answer, a refusal."""
_TEXT_FIELD_SET = frozenset(TEXT_FIELDS)
_PLAIN_CHOICE_KEYS = frozenset(("index", "delta", "finish_reason", "logprobs"))
_CALL_KEYS = frozenset(("index", "function"))  # an argument delta's call: any other key is null


def text_delta(data: dict[str, Any]) -> tuple[dict[str, Any], str, str] | None:
    """(its choice, the field, the text) when `data` is one choice's delta of one non-empty
    text and nothing else (no finish, no logprobs, no usage); else None."""
    try:
        (choice,) = data["choices"]
        ((field, text),) = choice["delta"].items()
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # the unpacking fails for any other shape: fewer tests for the usual one
    if field not in _TEXT_FIELD_SET or type(text) is not str or not text or not _quiet(data, choice):
        return None
    return choice, field, text


def argument_delta(data: dict[str, Any]) -> tuple[dict[str, Any], int, str] | None:
    """(its choice, the call's index, the arguments) when `data` is one choice's delta of one
    tool call's argument text and nothing else (no id, name or type, no finish, no logprobs,
    no usage); else None."""
    try:
        (choice,) = data["choices"]
        ((field, calls),) = choice["delta"].items()
        (call,) = calls
        ((name, arguments),) = call["function"].items()
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if field != "tool_calls" or name != "arguments" or type(arguments) is not str or not arguments:
        return None
    if type(call) is not dict or type(call.get("index")) is not int or not _quiet(data, choice):
        return None
    if any(value is not None for key, value in call.items() if key not in _CALL_KEYS):
        return None
    return choice, call["index"], arguments


def _quiet(data: dict[str, Any], choice: Any) -> bool:
    """The lone choice of `data` says nothing beyond its index and delta (any other key of it
    is null: finish_reason, logprobs...), and `data` carries no usage."""
    if type(choice) is not dict:
        return False
    if choice.get("finish_reason") is not None or choice.get("logprobs") is not None:
        return False
    if not choice.keys() <= _PLAIN_CHOICE_KEYS and any(
        value is not None for key, value in choice.items() if key not in _PLAIN_CHOICE_KEYS
    ):
        return False
    return data.get("usage") is None


_UNSEEN: Any = object()


class Chunk:
    """One streamed event: the JSON text as received, parsed only when someone looks."""

    __slots__ = ("_data", "_text", "dirty", "raw")

    def __init__(self, raw: bytes, data: dict[str, Any] | None = None) -> None:
        self.raw = raw
        self._data = data
        self._text: Any = _UNSEEN  # text_delta's answer once worked out
        self.dirty = False  # set by whoever changes `data`, so it is re-serialised

    def text_delta(self) -> tuple[dict[str, Any], str, str] | None:
        """(its choice, the field, the text) when this chunk is a plain text delta: one choice
        whose delta is one non-empty text (`TEXT_FIELDS`), no finish_reason, no logprobs, no
        usage, nothing else of note; None for any other chunk. Worked out at the first look
        and kept: the guards that ask (the first ones) ask before any of them changes it."""
        found: tuple[dict[str, Any], str, str] | None
        if self._text is _UNSEEN:
            found = text_delta(self.data)
            self._text = found
            return found
        found = self._text
        return found

    @property
    def data(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            parsed = orjson.loads(self.raw)
            data = parsed if isinstance(parsed, dict) else {"value": parsed}
            self._data = data
        return data

    def encoded(self) -> bytes:
        if self.dirty:
            self.raw = orjson.dumps(self.data)
            self.dirty = False
        return self.raw
