"""What the simulated model answers to a plain OpenAI request (no ``x_sim`` controls).

- ``tool_choice``: ``"none"`` never calls a tool; ``"auto"`` (the default when ``tools`` are
  given) calls the tools that fit the last user message (a word of four letters or more of
  the tool's name appears in it: ``get_weather`` fits "what is the weather?"), and answers
  with text after a tool result; ``"required"`` calls the fitting tools, else the first tool;
  ``{"type": "function", "function": {"name"}}`` calls that tool; ``allowed_tools`` narrows the
  tools, then acts as its ``mode``. Several fitting tools are called in parallel unless
  ``parallel_tool_calls`` is false. Arguments are generated from each tool's JSON schema.
- ``response_format``: ``json_schema`` answers an instance of the schema, ``json_object`` a
  small JSON object.
- ``stop`` cuts the text before the first stop sequence (``finish_reason "stop"``).
- Reasoning (profiles that think): a few words of reasoning text before the answer, unless
  ``chat_template_kwargs.thinking`` / ``enable_thinking`` is false; ``reasoning_effort`` sets
  how many. It counts towards ``max_tokens``.

Everything is a function of the request (and its ``seed``), so answers are reproducible.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from simulator.json_schema import instance

_NAME_WORDS = re.compile(r"[A-Za-z][a-z]*|[0-9]+")
_FIT_MIN_LETTERS = 4
REASONING_WORDS = {"low": 4, "medium": 8, "high": 16}
MAX_N = 128
MAX_STOP = 4


class BadRequest(ValueError):
    """The request cannot be served; answered with HTTP 400 in the path's error format."""


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """The tools one choice calls: (name, JSON schema of the parameters)."""

    calls: tuple[tuple[str, Any], ...]


def choice_count(body: dict[str, Any]) -> int:
    if "n" not in body or body["n"] is None:
        return 1
    n = body["n"]
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise BadRequest(f"'n' must be an integer between 1 and {MAX_N}")
    return n


def request_rng(body: dict[str, Any], messages: list[Any], choice: int) -> random.Random:
    """A generator determined by the request's messages, its ``seed`` and the choice index."""
    digest = zlib.crc32(orjson.dumps(messages))
    return random.Random(f"{body.get('seed')}:{choice}:{digest}")


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None


def _tools(body: dict[str, Any]) -> list[tuple[str, Any]]:
    raw = body.get("tools")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequest("'tools' must be an array")
    tools: list[tuple[str, Any]] = []
    for tool in raw:
        name = _tool_name(tool)
        if name is None:
            raise BadRequest("each tool needs 'function.name'")
        tools.append((name, tool["function"].get("parameters")))
    return tools


def _last_message(messages: list[Any]) -> tuple[str, str]:
    """The role of the last message, and the text of the last user message."""
    last = messages[-1]
    role = last.get("role") if isinstance(last, dict) else None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(role), text_of(message.get("content"))
    return str(role), ""


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def _fits(name: str, text: str) -> bool:
    words = (w.lower() for w in _NAME_WORDS.findall(name))
    return any(len(w) >= _FIT_MIN_LETTERS and w in text for w in words)


def _narrowed(choice: dict[str, Any], tools: list[tuple[str, Any]]) -> tuple[str, list[tuple[str, Any]]]:
    """``allowed_tools``: its mode and the tools it allows."""
    allowed = choice.get("allowed_tools")
    if not isinstance(allowed, dict) or not isinstance(allowed.get("tools"), list):
        raise BadRequest("tool_choice.allowed_tools needs a 'tools' array")
    names = {_tool_name(t) for t in allowed["tools"]}
    mode = allowed.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise BadRequest("tool_choice.allowed_tools.mode must be 'auto' or 'required'")
    return str(mode), [t for t in tools if t[0] in names]


def plan_tools(body: dict[str, Any], messages: list[Any]) -> ToolPlan | None:
    """The tool calls the request's ``tools`` / ``tool_choice`` lead to, None for a text answer."""
    tools = _tools(body)
    choice = body.get("tool_choice")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise BadRequest("'tool_choice' needs 'tools'")
        return None
    mode = "auto" if choice is None else choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "allowed_tools":
            mode, tools = _narrowed(choice, tools)
        elif kind == "function":
            name = _tool_name(choice)
            wanted = [t for t in tools if t[0] == name]
            if not wanted:
                raise BadRequest(f"tool_choice names a function that is not in 'tools': {name!r}")
            return ToolPlan((wanted[0],))
        else:
            raise BadRequest("tool_choice.type must be 'function' or 'allowed_tools'")
    if mode == "none" or not tools:
        return None
    if mode not in ("auto", "required"):
        raise BadRequest("'tool_choice' must be 'none', 'auto', 'required' or an object")
    role, text = _last_message(messages)
    if mode == "auto" and role == "tool":
        return None  # a tool answered: the model replies with text
    lowered = text.lower()
    fitting = [t for t in tools if _fits(t[0], lowered)]
    if not fitting:
        if mode == "auto":
            return None
        fitting = tools[:1]
    if body.get("parallel_tool_calls") is False:
        fitting = fitting[:1]
    return ToolPlan(tuple(fitting))


def arguments_for(schema: Any, rng: random.Random) -> str:
    """JSON arguments valid for a tool's ``parameters`` schema."""
    value = instance(schema if isinstance(schema, dict) else {"type": "object"}, rng)
    if not isinstance(value, dict):
        value = {}
    return orjson.dumps(value).decode()


def json_content(body: dict[str, Any], rng: random.Random) -> str | None:
    """The answer ``response_format`` asks for, None for plain text."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return '{"answer": "tok0 tok1 tok2"}'
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise BadRequest("response_format.json_schema needs a 'name'")
        # spaced separators: the tokenizer counts words, so the JSON streams in several chunks
        return json.dumps(instance(spec.get("schema", {}), rng), ensure_ascii=False)
    raise BadRequest("response_format.type must be 'text', 'json_object' or 'json_schema'")


def stop_sequences(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and len(stop) <= MAX_STOP and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise BadRequest(f"'stop' must be a string or an array of at most {MAX_STOP} strings")


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """``text`` up to the earliest stop sequence (excluded), and the sequence matched."""
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    if best is None:
        return text, None
    return text[: best[0]], best[1]


def reasoning_words(body: dict[str, Any]) -> int:
    """How many words of reasoning a thinking model writes for this request (0 = thinking off)."""
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and (
        kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False
    ):
        return 0
    effort = body.get("reasoning_effort")
    return REASONING_WORDS.get(effort, REASONING_WORDS["medium"]) if isinstance(effort, str) else 8


def reasoning_field(model: str) -> str:
    """Kimi K2.5 returns reasoning in ``reasoning_content``; K2.6 and later in ``reasoning``."""
    return "reasoning_content" if "k2.5" in model.lower() else "reasoning"
