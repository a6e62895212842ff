"""The Anthropic Messages request, translated into the internal chat-completions body.

    system (string | text blocks)      -> a first "system" message
    user text / image blocks           -> a user message's text / image_url parts
    user tool_result blocks            -> "tool" messages (before the user's other content)
    assistant text / tool_use blocks   -> an assistant message's content / tool_calls
    assistant thinking blocks          -> dropped (the model's earlier reasoning is not replayed)
    tools (custom)                     -> function tools; any server tool type is refused (400)
    tool_choice auto/any/tool/none     -> "auto" / "required" / {"type": "function", ...} / "none"
    disable_parallel_tool_use          -> parallel_tool_calls: false
    stop_sequences / metadata.user_id  -> stop / user
    thinking enabled (budget_tokens)   -> reasoning_effort low (< 4096), medium (< 16384), high

docs/api-compat.md has the whole table.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.doors.fields import (
    array,
    copy_extensions,
    function_head,
    invalid,
    missing,
    number,
    obj,
    positive_int,
    text,
    unsupported,
)

_ROLES = ("user", "assistant")
_PASSED = ("temperature", "top_p", "top_k")
_PASSED_SET = frozenset(_PASSED)
_REFUSED = {
    "mcp_servers": "MCP servers run by the API",
    "container": "Code-execution containers",
}
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# The fields of a usual body: one with none but these has no extension, which one test tells
_USUAL = frozenset(
    (
        "model",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "stream",
        "metadata",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "thinking",
    )
)


def chat_body(body: dict[str, Any], *, for_count: bool = False) -> dict[str, Any]:
    """The chat body for a Messages request. `for_count` (count_tokens) needs no max_tokens."""
    model = body.get("model")
    if model is None:
        raise missing("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "must be a non-empty string")
    usual = _USUAL.issuperset(body)  # the refused fields and extensions are not usual ones
    if not usual:
        for name, what in _REFUSED.items():
            if body.get(name) is not None:
                raise unsupported(name, what)
    out: dict[str, Any] = {"model": model}
    if not for_count:
        if body.get("max_tokens") is None:
            raise missing("max_tokens")
        out["max_tokens"] = positive_int(body["max_tokens"], "max_tokens")
    messages = _system(body.get("system"))
    system = len(messages)
    raw = body.get("messages")
    if raw is None:
        raise missing("messages")
    for index, message in enumerate(array(raw, "messages")):
        messages.extend(_message(message, index))
    if len(messages) == system:  # the messages' own translation is never a system message
        raise invalid("messages", "must hold at least one message")
    out["messages"] = messages
    _tools(body, out)
    stop = body.get("stop_sequences")
    if stop is not None:
        sequences = array(stop, "stop_sequences")
        for index, sequence in enumerate(sequences):
            text(sequence, f"stop_sequences[{index}]")
        if sequences:
            out["stop"] = sequences
    if not _PASSED_SET.isdisjoint(body):
        for name in _PASSED:
            if body.get(name) is not None:
                out[name] = number(body[name], name)
    metadata = body.get("metadata")
    if metadata is not None:
        user = obj(metadata, "metadata").get("user_id")
        if user is not None:
            out["user"] = text(user, "metadata.user_id")
    effort = thinking_effort(body.get("thinking"))
    if effort is not None:
        out["reasoning_effort"] = effort
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid("stream", "must be a boolean")
    if stream:
        # No `stream_options.include_usage`: the gateway asks the upstream for usage itself and
        # records it (UsageGuard); the encoders read it there, so the usage chunk never reaches them.
        out["stream"] = True
    if not usual:
        copy_extensions(body, out)
    return out


def thinking_effort(thinking: Any) -> str | None:
    """The reasoning effort asked for by `thinking`, or None when thinking is off."""
    if thinking is None:
        return None
    kind = obj(thinking, "thinking").get("type")
    if kind == "disabled":
        return None
    if kind == "adaptive":
        return "medium"
    if kind != "enabled":
        raise invalid("thinking.type", "must be one of enabled, disabled, adaptive")
    budget = thinking.get("budget_tokens")
    if budget is None:
        return "medium"
    budget = positive_int(budget, "thinking.budget_tokens")
    return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    parts = [_text_block(block, f"system[{i}]") for i, block in enumerate(array(system, "system"))]
    return [{"role": "system", "content": "\n\n".join(parts)}] if parts else []


def _text_block(block: Any, param: str) -> str:
    block = obj(block, param)
    if block.get("type") != "text":
        raise invalid(f"{param}.type", "must be text")
    return text(block.get("text"), f"{param}.text")


def _message(message: Any, index: int) -> list[dict[str, Any]]:
    if not isinstance(message, dict):
        raise invalid(f"messages[{index}]", "must be an object")
    role = message.get("role")
    content = message.get("content")
    if role in _ROLES and isinstance(content, str):  # the common short form: no names to format
        return [{"role": role, "content": content}]
    param = f"messages[{index}]"
    if role is None:
        raise missing(f"{param}.role")
    if role not in _ROLES:
        raise invalid(f"{param}.role", "must be user or assistant")
    if content is None:
        raise missing(f"{param}.content")
    blocks = array(content, f"{param}.content")
    return _user(blocks, param) if role == "user" else [_assistant(blocks, param)]


def _user(blocks: list[Any], param: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, raw in enumerate(blocks):
        where = f"{param}.content[{index}]"
        block = obj(raw, where)
        kind = block.get("type")
        if kind == "tool_result":
            results.append(_tool_result(block, where))
        else:
            parts.append(_part(block, kind, where))
    if parts:
        results.append({"role": "user", "content": parts})
    return results


def _part(block: dict[str, Any], kind: Any, where: str) -> dict[str, Any]:
    if kind == "text":
        return {"type": "text", "text": text(block.get("text"), f"{where}.text")}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": _image_url(block.get("source"), f"{where}.source")}}
    if kind in ("document", "search_result", "container_upload"):
        raise unsupported(f"{where}.type", f"A '{kind}' content block")
    raise invalid(f"{where}.type", "must be one of text, image, tool_use, tool_result")


def _image_url(source: Any, param: str) -> str:
    source = obj(source, param)
    kind = source.get("type")
    if kind == "base64":
        media = text(source.get("media_type"), f"{param}.media_type")
        if media not in _IMAGE_TYPES:
            raise invalid(f"{param}.media_type", f"must be one of {', '.join(sorted(_IMAGE_TYPES))}")
        return f"data:{media};base64,{text(source.get('data'), f'{param}.data')}"
    if kind == "url":
        return text(source.get("url"), f"{param}.url")
    if kind == "file":
        raise unsupported(f"{param}.type", "An image from the Files API")
    raise invalid(f"{param}.type", "must be base64 or url")


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = text(block.get("tool_use_id"), f"{where}.tool_use_id")
    content = block.get("content")
    if content is None:
        output: str | list[dict[str, Any]] = ""
    elif isinstance(content, str):
        output = content
    else:
        output = [
            _part(obj(p, f"{where}.content[{i}]"), p.get("type"), f"{where}.content[{i}]")
            for i, p in enumerate(array(content, f"{where}.content"))
        ]
        if all(p["type"] == "text" for p in output):
            output = "".join(p["text"] for p in output)
    if block.get("is_error") is True and isinstance(output, str):
        output = f"Error: {output}"
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _assistant(blocks: list[Any], param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for index, raw in enumerate(blocks):
        where = f"{param}.content[{index}]"
        block = obj(raw, where)
        kind = block.get("type")
        if kind == "text":
            texts.append(text(block.get("text"), f"{where}.text"))
        elif kind == "tool_use":
            arguments = obj(block.get("input", {}), f"{where}.input")
            calls.append(
                {
                    "id": text(block.get("id"), f"{where}.id"),
                    "type": "function",
                    "function": {
                        "name": text(block.get("name"), f"{where}.name"),
                        "arguments": orjson.dumps(arguments).decode(),
                    },
                }
            )
        elif kind not in ("thinking", "redacted_thinking"):
            raise invalid(f"{where}.type", "must be one of text, tool_use, thinking in an assistant message")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _tools(body: dict[str, Any], out: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is not None:
        functions: list[dict[str, Any]] = []
        server: list[str] = []
        for index, tool in enumerate(array(tools, "tools")):
            if not isinstance(tool, dict):
                raise invalid(f"tools[{index}]", "must be an object")
            kind = tool.get("type")
            if kind not in (None, "custom"):
                server.append(str(kind))
                continue
            functions.append({"type": "function", "function": _function(tool, index)})
        if server:
            raise unsupported(
                "tools", f"Server tools ({', '.join(server)}; only custom tools can be offered)"
            )
        if functions:
            out["tools"] = functions
    choice = body.get("tool_choice")
    if choice is not None:
        choice = obj(choice, "tool_choice")
        kind = choice.get("type")
        if kind == "auto":
            out["tool_choice"] = "auto"
        elif kind == "any":
            out["tool_choice"] = "required"
        elif kind == "none":
            out["tool_choice"] = "none"
        elif kind == "tool":
            name = text(choice.get("name"), "tool_choice.name")
            out["tool_choice"] = {"type": "function", "function": {"name": name}}
        else:
            raise invalid("tool_choice.type", "must be one of auto, any, tool, none")
        if choice.get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False
    if "tools" not in out:  # nothing to choose from: the choice means nothing upstream
        out.pop("tool_choice", None)
        out.pop("parallel_tool_calls", None)


def _function(tool: dict[str, Any], index: int) -> dict[str, Any]:
    """A custom tool as chat's `function`."""
    function = function_head(tool, index)
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise invalid(f"tools[{index}].input_schema", "must be an object")
    function["parameters"] = schema
    return function
