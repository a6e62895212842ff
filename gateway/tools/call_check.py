"""One verdict per tool call: may the model call this tool, with these arguments?"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from gateway.policy.decision import ArgConstraint, Decision
from gateway.tools.arg_paths import InvalidPath, ShapeMismatch, parse_path, values_at
from gateway.tools.destinations import check_destination

_NAME_SHOWN = 64


@dataclass(frozen=True, slots=True)
class BlockedCall:
    """A model-emitted tool call the gateway kept from the client."""

    name: str
    reason: str

    def note(self) -> str:
        """The explanation the client reads in the message content."""
        name = self.name if len(self.name) <= _NAME_SHOWN else self.name[:_NAME_SHOWN] + "..."
        return f"[tollgate] tool call {name!r} blocked by policy: {self.reason}"


def tool_refusal(decision: Decision, name: str) -> str | None:
    """Why the tool may not be called at all, or None."""
    if not name:
        return "the tool call has no name"
    if name not in decision.tools.allowed:
        return "the tool is not allowed"
    return None


def needs_argument_check(decision: Decision, name: str) -> bool:
    return bool(decision.tool_args.get(name))


def check_call(decision: Decision, name: str, arguments: str) -> str | None:
    """None when the call may reach the client, else why it may not."""
    refusal = tool_refusal(decision, name)
    if refusal is not None:
        return refusal
    constraints = decision.tool_args.get(name)
    return check_arguments(constraints, arguments) if constraints else None


def check_arguments(constraints: Mapping[str, ArgConstraint], arguments: str) -> str | None:
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return "the arguments are not valid JSON"
    if not isinstance(parsed, dict):
        return "the arguments are not a JSON object"
    for path, rule in constraints.items():
        try:
            steps = parse_path(path)
            found = list(values_at(parsed, steps))
        except InvalidPath:
            return f"the policy's argument path {path!r} is invalid"
        except ShapeMismatch as exc:
            return f"argument {path!r}: {exc}"
        for value in found:
            for item in value if isinstance(value, list) else (value,):
                if not isinstance(item, str):
                    return f"argument {path!r} is not a string"
                reason = check_destination(item, rule)
                if reason is not None:
                    return f"argument {path!r}: {reason}"
    return None
