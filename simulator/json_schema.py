"""A deterministic instance of a JSON schema: what a schema-constrained decoder would emit.

Covers the subset tool parameters and ``response_format`` schemas use in practice: ``type``
(one or a list), ``object`` (``properties``, ``required``), ``array`` (``items``,
``minItems``/``maxItems``), ``enum``, ``const``, ``default``, strings (``minLength``/``maxLength``
and the common ``format`` values), ``integer``/``number`` bounds (inclusive, exclusive,
``multipleOf``), ``boolean``, ``null``, ``anyOf``/``oneOf`` (the first branch), ``allOf`` (merged)
and ``$ref`` to ``#/$defs/...`` or ``#/definitions/...``. ``pattern`` is not honoured.

Values come from a ``random.Random`` the caller seeds, so one request and seed always give
the same instance.
"""

from __future__ import annotations

import math
import random
from typing import Any

_MAX_DEPTH = 12
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_FORMATS: dict[str, str] = {
    "date-time": "2026-01-02T03:04:05Z",
    "date": "2026-01-02",
    "time": "03:04:05Z",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "hostname": "example.com",
}


def instance(schema: Any, rng: random.Random) -> Any:
    """A value valid for ``schema`` (a dict, or ``True``/absent for "anything")."""
    root = schema if isinstance(schema, dict) else {}
    return _Generator(root, rng).value(root, 0)


class _Generator:
    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def _resolve(self, ref: str) -> dict[str, Any]:
        node: Any = self.root
        if ref != "#":
            for part in ref.removeprefix("#/").split("/"):
                node = (
                    node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
                )
        return node if isinstance(node, dict) else {}

    def value(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return None if depth > _MAX_DEPTH else "value"
        if isinstance(schema.get("$ref"), str):
            return self.value(self._resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][self.rng.randrange(len(schema["enum"]))]
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                base = {k: v for k, v in schema.items() if k != key}
                return self.value({**base, **_as_dict(branches[0])}, depth + 1)
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                resolved = self._resolve(part["$ref"]) if isinstance(part, dict) and "$ref" in part else part
                merged = _merge(merged, _as_dict(resolved))
            return self.value(merged, depth + 1)
        if "default" in schema:
            return schema["default"]
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        return self._typed(str(kind), schema, depth)

    def _typed(self, kind: str, schema: dict[str, Any], depth: int) -> Any:
        if kind == "object":
            properties = _as_dict(schema.get("properties"))
            result = {name: self.value(sub, depth + 1) for name, sub in properties.items()}
            required = schema.get("required")
            for name in required if isinstance(required, list) else ():
                if isinstance(name, str) and name not in result:
                    result[name] = "value"
            return result
        if kind == "array":
            low = _int(schema.get("minItems"), 0)
            high = _int(schema.get("maxItems"), max(low, 2))
            count = max(low, min(high, 1 + self.rng.randrange(2)))
            items = schema.get("items")
            prefix = schema.get("prefixItems")
            if isinstance(prefix, list):
                return [self.value(p, depth + 1) for p in prefix][: max(count, len(prefix))]
            return [self.value(items, depth + 1) for _ in range(count)]
        if kind in ("integer", "number"):
            return self._number(schema, kind == "integer")
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self._string(schema)

    def _string(self, schema: dict[str, Any]) -> str:
        text = _FORMATS.get(str(schema.get("format")))
        if text is None:
            text = self.rng.choice(_WORDS)
        low = _int(schema.get("minLength"), 0)
        high = _int(schema.get("maxLength"), max(low, len(text)))
        if len(text) < low:
            text = (text * (low // max(1, len(text)) + 1))[:low]
        return text[:high]

    def _number(self, schema: dict[str, Any], integer: bool) -> int | float:
        low = _float(schema.get("minimum"))
        high = _float(schema.get("maximum"))
        ex_low = _float(schema.get("exclusiveMinimum"))
        ex_high = _float(schema.get("exclusiveMaximum"))
        step = _float(schema.get("multipleOf"))
        if integer:
            lo = math.ceil(low) if low is not None else None
            if ex_low is not None:
                lo = max(lo, math.floor(ex_low) + 1) if lo is not None else math.floor(ex_low) + 1
            hi = math.floor(high) if high is not None else None
            if ex_high is not None:
                hi = min(hi, math.ceil(ex_high) - 1) if hi is not None else math.ceil(ex_high) - 1
            lo = lo if lo is not None else (hi - 10 if hi is not None else 0)
            hi = hi if hi is not None else lo + 10
            if step is not None and step >= 1 and float(step).is_integer():
                unit = int(step)
                first = -(-lo // unit) * unit
                return first if first <= hi else lo
            return lo + self.rng.randrange(max(1, hi - lo + 1)) if hi >= lo else lo
        lo_f = low if low is not None else (ex_low + 0.5 if ex_low is not None else None)
        hi_f = high if high is not None else (ex_high - 0.5 if ex_high is not None else None)
        if lo_f is None:
            lo_f = hi_f - 10.0 if hi_f is not None else 0.0
        if hi_f is None:
            hi_f = lo_f + 10.0
        if ex_low is not None and ex_high is not None:
            lo_f, hi_f = ex_low + (ex_high - ex_low) / 4, ex_high - (ex_high - ex_low) / 4
        if step is not None and step > 0:
            return math.ceil(lo_f / step) * step
        return round(lo_f + (hi_f - lo_f) * self.rng.random(), 3) if hi_f > lo_f else lo_f


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _merge(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    merged = {**left, **right}
    if "properties" in left or "properties" in right:
        merged["properties"] = {**_as_dict(left.get("properties")), **_as_dict(right.get("properties"))}
    return merged


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
