"""One verdict per tool call: may the model call this tool, with these arguments?"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.policy.decision import ArgConstraint, Decision
from gateway.tools.arg_paths import InvalidPath, MissingArgument, ShapeMismatch, parse_path, values_at
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
    """None when every constrained argument is a string pointing where its rule allows."""
    try:
        parsed = json.loads(arguments, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except _DuplicateKey as duplicate:
        return f"the arguments repeat the key {str(duplicate)!r}"
    except (ValueError, RecursionError):
        return "the arguments are not valid JSON"
    if not isinstance(parsed, dict):
        return "the arguments are not a JSON object"
    for path, rule in constraints.items():
        try:
            found = list(values_at(parsed, parse_path(path), required=rule.required))
        except InvalidPath:
            return f"the policy's argument path {path!r} is invalid"
        except MissingArgument:
            return f"required argument {path!r} is missing"
        except ShapeMismatch as mismatch:  # its own name: compiled, a name keeps its first type
            return f"argument {path!r}: {mismatch}"
        for value in found:
            if not isinstance(value, str):
                return f"argument {path!r} is not a string but {_json_type(value)}"
            reason = check_destination(value, rule)
            if reason is not None:
                return f"argument {path!r}: {reason}"
    return None


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON parsers disagree on which of two equal keys wins: the tool might read the one
    # that was not checked.
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an array" if isinstance(value, list) else "an object"
