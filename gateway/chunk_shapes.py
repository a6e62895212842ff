"""The shapes of streamed chunk that the response guards take a shorter way for: one choice's
text, or one tool call's argument text, and nothing else (`Chunk.text_delta`, and the
redaction guard's scan per upstream read)."""

from __future__ import annotations

from typing import Any

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
