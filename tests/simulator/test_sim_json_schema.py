"""The schema-instance generator: what it makes validates against its schema (``jsonschema``)."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from simulator.json_schema import instance

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]},
    {
        "type": "array",
        "items": {"type": "integer", "minimum": -3, "maximum": -1},
        "minItems": 3,
        "maxItems": 4,
    },
    {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 12},
    {"type": "integer", "minimum": 5, "multipleOf": 4},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number", "minimum": 1, "multipleOf": 0.5},
    {"type": "string", "minLength": 12, "maxLength": 12},
    {"type": "string", "format": "email"},
    {"type": "string", "format": "date"},
    {"type": ["null", "boolean"]},
    {"enum": ["x", 2, None]},
    {"const": {"fixed": [1]}},
    {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]},
    {
        "$defs": {
            "node": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        },
        "type": "object",
        "properties": {
            "root": {"$ref": "#/$defs/node"},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
        },
        "required": ["root", "kids"],
        "additionalProperties": False,
    },
    {"definitions": {"n": {"type": "number", "maximum": -5}}, "$ref": "#/definitions/n"},
    {"type": "object", "properties": {"d": {"type": "string", "default": "preset"}}},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[str(i) for i in range(len(SCHEMAS))])
def test_instances_validate(schema: dict[str, Any]) -> None:
    checker = jsonschema.FormatChecker()
    for seed in range(20):
        jsonschema.validate(instance(schema, random.Random(seed)), schema, format_checker=checker)


def test_the_same_seed_gives_the_same_instance() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "e": {"enum": list("abcdefgh")}}}
    assert instance(schema, random.Random("s")) == instance(schema, random.Random("s"))
    assert len({str(instance(schema, random.Random(i))) for i in range(20)}) > 1


def test_self_reference_stops() -> None:
    schema = {
        "$defs": {"t": {"type": "object", "properties": {"next": {"$ref": "#/$defs/t"}}}},
        "$ref": "#/$defs/t",
    }
    value = instance(schema, random.Random(0))
    depth = 0
    while isinstance(value, dict) and value.get("next") is not None:
        value, depth = value["next"], depth + 1
    assert depth < 20
