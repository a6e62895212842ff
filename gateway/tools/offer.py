"""The request-side tool guard: a request may offer the model only the tools its decision
allows.

Offered tools that are not allowed are stripped from `tools`, or the request is refused
(403 `tool_not_allowed`, naming them), as `decision.tools.on_violation` says. A
`tool_choice` naming a disallowed tool is always refused: the client demanded a call the
policy forbids. When stripping leaves no tools, `tools`, `tool_choice` and
`parallel_tool_calls` are removed, so the upstream does not reject the request.
The legacy `functions` / `function_call` fields are refused (400): the response guard
checks calls only in the `tool_calls` form.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequest, PermissionDenied
from gateway.exchange import Endpoint, Exchange


class ToolOffer:
    name = "tool_offer"

    async def __call__(self, exchange: Exchange) -> None:
        decision = exchange.decision
        if decision is None or exchange.endpoint is not Endpoint.CHAT:
            return
        body = exchange.body
        for legacy in ("functions", "function_call"):
            if body.get(legacy) is not None:
                raise InvalidRequest(
                    f"'{legacy}' is not supported by this gateway; use 'tools' and 'tool_choice'.",
                    param=legacy,
                    code="unsupported_parameter",
                )
        allowed = decision.tools.allowed
        chosen = [name for name in _chosen_tools(body.get("tool_choice")) if name not in allowed]
        if chosen:
            raise _not_allowed(chosen, "tool_choice")
        tools = body.get("tools")
        if not isinstance(tools, list) or not tools:
            return
        refused = [name for name in map(_tool_name, tools) if name not in allowed]
        if not refused:
            return
        if decision.tools.on_violation == "reject":
            raise _not_allowed(refused, "tools")
        kept = [tool for tool in tools if _tool_name(tool) in allowed]
        if kept:
            body["tools"] = kept
        else:
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                body.pop(key, None)


def _tool_name(tool: Any) -> str:
    """A function tool's name; for other tool types, the name under their type key, else the type."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if not isinstance(kind, str):
        return ""
    spec = tool.get(kind)
    name = spec.get("name") if isinstance(spec, dict) else kind
    return name if isinstance(name, str) else ""


def _chosen_tools(choice: Any) -> list[str]:
    """The tools a `tool_choice` object names (none for "auto", "none", "required")."""
    if not isinstance(choice, dict):
        return []
    if choice.get("type") == "allowed_tools":
        spec = choice.get("allowed_tools")
        tools = spec.get("tools") if isinstance(spec, dict) else None
        return [_tool_name(tool) for tool in tools] if isinstance(tools, list) else []
    return [_tool_name(choice)]


def _not_allowed(names: list[str], param: str) -> PermissionDenied:
    shown = ", ".join(repr(name) for name in dict.fromkeys(names))
    return PermissionDenied(
        f"Tools not allowed by policy: {shown}.",
        param=param,
        code="tool_not_allowed",
    )
