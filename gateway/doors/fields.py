"""Reading a door's request body: typed look-ups that fail with InvalidRequest naming the field
in the door's own terms (`messages[2].content[0].source`), never with a KeyError or TypeError."""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequest

# Fields with this prefix are extensions for the upstream (a server's own controls), passed
# through every door unchanged, as the chat door passes every field it does not know.
EXTENSION_PREFIX = "x_"


def missing(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def invalid(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': {why}.", param=param, code="invalid_value")


def unsupported(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(
        f"{what} is not supported by this gateway ('{param}').", param=param, code="unsupported_parameter"
    )


def text(value: Any, param: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if value is None:
        raise missing(param)
    if not isinstance(value, str):
        raise invalid(param, "must be a string")
    return value


def obj(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(param, "must be an object")
    return value


def array(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(param, "must be an array")
    return value


def positive_int(value: Any, param: str) -> int:
    if value.__class__ is not int or value < 1:  # JSON's integers (a bool's class is bool)
        raise invalid(param, "must be a positive integer")
    return value


def number(value: Any, param: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise invalid(param, "must be a number")
    return value


def boolean(value: Any, param: str) -> bool:
    if not isinstance(value, bool):
        raise invalid(param, "must be a boolean")
    return value


def function_head(tool: dict[str, Any], index: int) -> dict[str, Any]:
    """A tool's `name` and `description` as chat's `function` begins; its fields' names are
    formatted only for an error."""
    name = tool.get("name")
    description = tool.get("description")
    if name.__class__ is str and description.__class__ is str:  # the usual tool
        return {"name": name, "description": description}
    if not isinstance(name, str):
        name = text(name, f"tools[{index}].name")  # raises: missing, or not a string
    function: dict[str, Any] = {"name": name}
    if description is not None:
        if not isinstance(description, str):
            raise invalid(f"tools[{index}].description", "must be a string")
        function["description"] = description
    return function


def copy_extensions(body: dict[str, Any], into: dict[str, Any]) -> None:
    if "\n" + EXTENSION_PREFIX not in "\n" + "\n".join(body):  # most bodies: none, found in one scan
        return
    for name, value in body.items():
        if name.startswith(EXTENSION_PREFIX):
            into[name] = value
