"""The Responses API request, translated into the internal chat-completions body.

    instructions                       -> a first "system" message (never carried to the next turn)
    previous_response_id               -> the stored conversation, before this turn's input
    input (string)                     -> one user message
    input message items (input_text, input_image, output_text) -> messages with text / image_url parts
    function_call items                -> an assistant message's tool_calls (consecutive calls join)
    function_call_output items         -> "tool" messages
    reasoning items                    -> dropped (earlier reasoning is not replayed)
    tools (function)                   -> function tools; built-in tools are refused (400, named)
    tool_choice                        -> chat's tool_choice; parallel_tool_calls as is
    text.format json_schema/json_object -> response_format
    max_output_tokens / reasoning.effort -> max_tokens / reasoning_effort

docs/api-compat.md has the whole table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.doors.fields import (
    array,
    boolean,
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

_ROLES = ("user", "assistant", "system", "developer")  # a tuple: any JSON value can be looked up
_REFUSED = {
    "conversation": "Conversations",
    "prompt": "Prompt templates",
}
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_FLAGS = ("store", "stream", "parallel_tool_calls", "background")  # booleans when given
_COMMON_FLAGS = _FLAGS[:2]  # those not in _RARE
# The fields most bodies leave out: checked only when a body has one of them (found in one
# test), in their place among the others, so that the first error is the same either way
_RARE = frozenset(
    (
        *_REFUSED,
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "temperature",
        "top_p",
        "user",
        "safety_identifier",
        "background",
        "metadata",
    )
)
# The fields of a usual body: one with none but these has no rare field and no extension,
# which one test tells (the others: unknown fields, ignored, and extensions, passed on)
_USUAL = frozenset(
    (
        "model",
        "input",
        "instructions",
        "tools",
        "max_output_tokens",
        "stream",
        "store",
        "previous_response_id",
        "truncation",
        "include",
        "prompt_cache_key",
        "service_tier",
    )
)


def input_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """This turn's input as chat messages (no instructions, no history)."""
    raw = body.get("input")
    if raw is None:
        raise missing("input")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(array(raw, "input")):
        _item(obj(item, f"input[{index}]"), f"input[{index}]", messages)
    if not messages:
        raise invalid("input", "must hold at least one message or function call output")
    return messages


def chat_body(
    body: dict[str, Any], history: list[dict[str, Any]], turn: list[dict[str, Any]]
) -> dict[str, Any]:
    """The chat body: instructions, then the stored history, then this turn's input.

    Run once per request, cold among the pipeline's code: each field is read once, and the
    fields most bodies leave out (`_RARE`), and extensions, are looked for only when a body
    has a field outside `_USUAL`."""
    get = body.get
    model = get("model")
    if model is None:
        raise missing("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "must be a non-empty string")
    usual = _USUAL.issuperset(body)
    rare = not usual and not _RARE.isdisjoint(body)
    if rare:
        if get("conversation") not in (None, False):
            raise unsupported("conversation", _REFUSED["conversation"])
        if get("prompt") not in (None, False):
            raise unsupported("prompt", _REFUSED["prompt"])
    instructions = get("instructions")
    if instructions is not None and text(instructions, "instructions"):
        messages = [{"role": "system", "content": instructions}, *history, *turn]
    else:
        messages = [*history, *turn]
    out: dict[str, Any] = {"model": model, "messages": messages}
    tools = get("tools")
    if tools is not None:
        _tools(tools, out)
        if rare and "tools" in out:
            choice = get("tool_choice")
            if choice is not None:
                out["tool_choice"] = _choice(choice)
            parallel = get("parallel_tool_calls")
            if parallel is not None:
                out["parallel_tool_calls"] = boolean(parallel, "parallel_tool_calls")
    if rare:
        value = get("text")
        if value is not None:
            _format(value, out)
    value = get("max_output_tokens")
    if value is not None:
        out["max_tokens"] = positive_int(value, "max_output_tokens")
    if rare:
        _options(get, out)
    for name in _FLAGS if rare else _COMMON_FLAGS:
        value = get(name)
        if value is not None and value.__class__ is not bool:
            raise invalid(name, "must be a boolean")
    if rare:
        value = get("metadata")
        if value is not None and not isinstance(value, dict):
            raise invalid("metadata", "must be an object")
    if get("stream"):
        # No `stream_options.include_usage`: the gateway asks the upstream for usage itself and
        # records it (UsageGuard); the encoders read it there, so the usage chunk never reaches them.
        out["stream"] = True
    if not usual:
        copy_extensions(body, out)
    return out


def _options(get: Callable[[str], Any], out: dict[str, Any]) -> None:
    """The generation options but `max_output_tokens`, in chat's terms (`get`: the body's)."""
    reasoning = get("reasoning")
    if reasoning is not None:
        effort = obj(reasoning, "reasoning").get("effort")
        if effort is not None:
            if effort not in _EFFORTS:
                raise invalid("reasoning.effort", f"must be one of {', '.join(sorted(_EFFORTS))}")
            out["reasoning_effort"] = effort
    value = get("temperature")
    if value is not None:
        out["temperature"] = number(value, "temperature")
    value = get("top_p")
    if value is not None:
        out["top_p"] = number(value, "top_p")
    value = get("user")
    if value is not None:
        out["user"] = text(value, "user")
    value = get("safety_identifier")
    if value is not None:
        out["user"] = text(value, "safety_identifier")


def _item(item: dict[str, Any], param: str, messages: list[dict[str, Any]]) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        messages.append(_message(item, param))
    elif kind == "function_call":
        call = {
            "id": text(item.get("call_id"), f"{param}.call_id"),
            "type": "function",
            "function": {
                "name": text(item.get("name"), f"{param}.name"),
                "arguments": text(item.get("arguments"), f"{param}.arguments"),
            },
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":  # the calls join the answer they follow
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        if isinstance(output, list):
            output = "".join(_output_text(p, f"{param}.output[{i}]") for i, p in enumerate(output))
        messages.append(
            {
                "role": "tool",
                "tool_call_id": text(item.get("call_id"), f"{param}.call_id"),
                "content": text(output, f"{param}.output"),
            }
        )
    elif kind == "reasoning":
        return
    elif kind == "item_reference":
        raise unsupported(f"{param}.type", "An item reference")
    else:
        raise unsupported(f"{param}.type", f"An input item of type '{kind}'")


def _output_text(part: Any, param: str) -> str:
    part = obj(part, param)
    if part.get("type") not in ("input_text", "output_text"):
        raise invalid(f"{param}.type", "must be input_text")
    return text(part.get("text"), f"{param}.text")


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    role = item.get("role")
    if role is None:
        raise missing(f"{param}.role")
    if role not in _ROLES:
        raise invalid(f"{param}.role", f"must be one of {', '.join(sorted(_ROLES))}")
    content = item.get("content")
    if content is None:
        raise missing(f"{param}.content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = [
        _part(obj(p, f"{param}.content[{i}]"), f"{param}.content[{i}]")
        for i, p in enumerate(array(content, f"{param}.content"))
    ]
    if role != "user" and all(p["type"] == "text" for p in parts):
        return {"role": role, "content": "".join(p["text"] for p in parts)}
    return {"role": role, "content": parts}


def _part(part: dict[str, Any], param: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": text(part.get("text"), f"{param}.text")}
    if kind == "refusal":
        return {"type": "text", "text": text(part.get("refusal"), f"{param}.refusal")}
    if kind == "input_image":
        if part.get("image_url") is None:
            if part.get("file_id") is not None:
                raise unsupported(f"{param}.file_id", "An image from the Files API")
            raise missing(f"{param}.image_url")
        image: dict[str, Any] = {"url": text(part.get("image_url"), f"{param}.image_url")}
        detail = part.get("detail")
        if detail is not None:
            if detail not in ("low", "high", "auto"):
                raise invalid(f"{param}.detail", "must be one of low, high, auto")
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    if kind in ("input_file", "input_audio"):
        raise unsupported(f"{param}.type", f"A '{kind}' content part")
    raise invalid(f"{param}.type", "must be one of input_text, input_image, output_text")


def _tools(tools: Any, out: dict[str, Any]) -> None:
    functions: list[dict[str, Any]] = []
    builtin: list[str] = []
    for index, tool in enumerate(array(tools, "tools")):
        if not isinstance(tool, dict):
            raise invalid(f"tools[{index}]", "must be an object")
        kind = tool.get("type")
        if kind != "function":
            builtin.append(str(kind))
            continue
        function = function_head(tool, index)
        parameters = tool.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise invalid(f"tools[{index}].parameters", "must be an object")
            function["parameters"] = parameters
        strict = tool.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise invalid(f"tools[{index}].strict", "must be a boolean")
            function["strict"] = strict
        functions.append({"type": "function", "function": function})
    if builtin:
        raise unsupported(
            "tools",
            f"Built-in tools ({', '.join(builtin)}; the gateway cannot run them, offer function tools)",
        )
    if functions:
        out["tools"] = functions


def _choice(choice: Any) -> Any:
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise invalid("tool_choice", "must be one of auto, none, required, or an object")
        return choice
    choice = obj(choice, "tool_choice")
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": text(choice.get("name"), "tool_choice.name")}}
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise invalid("tool_choice.mode", "must be auto or required")
        names = []
        for index, raw in enumerate(array(choice.get("tools"), "tool_choice.tools")):
            tool = obj(raw, f"tool_choice.tools[{index}]")
            if tool.get("type") != "function":
                raise unsupported(f"tool_choice.tools[{index}].type", "A built-in tool")
            names.append(
                {
                    "type": "function",
                    "function": {"name": text(tool.get("name"), f"tool_choice.tools[{index}].name")},
                }
            )
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": names}}
    raise unsupported("tool_choice.type", f"A tool choice of type '{kind}'")


def _format(value: Any, out: dict[str, Any]) -> None:
    if value is None:
        return
    fmt = obj(value, "text").get("format")
    if fmt is None:
        return
    fmt = obj(fmt, "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return
    if kind == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        schema: dict[str, Any] = {
            "name": text(fmt.get("name"), "text.format.name"),
            "schema": obj(fmt.get("schema"), "text.format.schema"),
        }
        if fmt.get("strict") is not None:
            schema["strict"] = boolean(fmt["strict"], "text.format.strict")
        if fmt.get("description") is not None:
            schema["description"] = text(fmt["description"], "text.format.description")
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    else:
        raise invalid("text.format.type", "must be one of text, json_object, json_schema")
