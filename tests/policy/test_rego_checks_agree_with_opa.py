"""The loader's checks refuse what OPA's compiler refuses, without OPA: a corpus of broken
policies (each refused by OPA, checked here against OPA's own engine) and of tricky valid
ones (each accepted by both), and the negations whose answer differs between the engines.

Without these checks the embedded engine loads each broken policy, its tests may pass, and
the rule with the mistake silently never fires."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import regopy

from adapters.policy.rego_checks import check_modules
from adapters.policy.rego_types import TABLE
from adapters.policy.source import PolicyLoadError, RegoFile, read_policy_dir
from tests.policy.conftest import SHIPPED_POLICIES
from tests.policy.opa_reference import (
    OpaError,
    builtin_kinds,
    compile_errors,
    decide,
    opa_capabilities,
    opa_engine,
    table_text,
)

IS_BUILTIN = regopy.Interpreter().is_builtin

# name -> (rule text, what the refusal names)
UNSAFE: dict[str, tuple[str, str]] = {
    "a misspelled variable in a deny message": (
        'deny contains msg if {\n\tname := input.tenant\n\tmsg := concat(" ", ["tenant", nmae])\n}',
        "var nmae is unsafe",
    ),
    "a misspelled variable in a condition": (
        'deny contains "bad tenant" if {\n\ttenant := input.tenant\n\ttenant == tenat\n}',
        "var tenat is unsafe",
    ),
    "a head variable nothing binds": ("deny contains msg if input.x == 1", "var msg is unsafe"),
    "a variable bound only under not": (
        'deny contains "m" if {\n\tnot data.blocked[i]\n\ti == 1\n}',
        "var i is unsafe",
    ),
    "a misspelled rule name": (
        'known if input.tenant == "demo"\nallow if known_tenat',
        "var known_tenat is unsafe",
    ),
    "a misspelled variable in a function": ("f(x) := y if {\n\ty := z + 1\n}", "var z is unsafe"),
    "a comprehension variable nothing binds": ("s := {x | x > 1}", "var x is unsafe"),
    "an object key nothing binds": ("o := {k: 1}", "var k is unsafe"),
}

TYPE_ERRORS: dict[str, tuple[str, str]] = {
    "count of a number": ('deny contains "m" if count(1) > 0', "count"),
    "startswith on a number variable": (
        'deny contains "m" if {\n\tx := 5\n\tstartswith(x, "a")\n}',
        "startswith",
    ),
    "concat of a count": ('m := concat(", ", count(input.xs))', "concat"),
    "a string plus a number": ('n := "a" + 1', "+"),
    "a string variable times two": ('n := y if {\n\tx := "a"\n\ty := x * 2\n}', "*"),
    "lower of a number": ("m := lower(5)", "lower"),
    "sprintf with a string for its values": ('m := sprintf("%v", "a")', "sprintf"),
    "object.get on a string": ('m := object.get("a", "b", 1)', "object.get"),
    "concat with one argument": ('m := concat(",")', "concat"),
    "startswith on a count": (
        'deny contains "m" if {\n\tx := count(input.xs)\n\tstartswith(x, "a")\n}',
        "startswith",
    ),
    "a set minus a string": ('m := {"a"} - "a"', "-"),
    "upper of an array": ('m := upper(["a"])', "upper"),
    "concat of an array holding a number": ('m := concat(", ", ["a", 1])', "concat"),
    "a constant rule of the wrong kind": (
        'table := {"A": 1}\nm := strings.replace_n(table, "ABC")',
        "strings.replace_n",
    ),
    "the builtin contains given a number": ("x if contains(input.s, 1)", "contains"),
    "count of a boolean rule": ("allow if input.x\nn := count(allow)", "count"),
    "a rule with a string value in arithmetic": ('name := "a" if input.x\nn := name + 1', "+"),
}

VALID: dict[str, str] = {
    "some over a list": "deny contains msg if {\n\tsome name in input.tools\n\tmsg := name\n}",
    "a partial object": "p[k] := v if {\n\tsome k, v in input.o\n}",
    "a function": "f(x) := y if y := x + 1",
    "a comprehension": "s := {x | some x in input.xs; x > 1}",
    "array destructuring": "a if {\n\t[x, y] := [1, 2]\n\tx < y\n}",
    "a reference index binds": 'b if {\n\tdata.tenants[t]\n\tt == "demo"\n}',
    "unification both ways": "c if {\n\tx = 5\n\tx > 1\n}\nd if {\n\t5 = y\n\ty > 1\n}",
    "every": "e if every x in input.xs { x > 0 }",
    "not over a reference": "h if not input.x",
    "an object comprehension": "o := {k: 1 | some k in input.ks}",
    "typed values that fit": (
        't := x if {\n\tx := concat(", ", ["a"])\n\tstartswith(x, "a")\n}\n'
        'u := 1 + count(input.xs)\nw := {"a", "b"} - {"a"}'
    ),
    "not over a builtin on a value with a default": (
        "default kind := null\nkind := input.kind\nk if not is_string(kind)"
    ),
    "not over a builtin on a local": "g(v) if not is_string(v)",
    "not over object.get": 'j if not startswith(object.get(input, "x", ""), "a")',
    "with in a test": "p := input.a\ntest_p if p with input.a as true",
    "else": "r := 1 if input.a else := 2",
    "an import": "import data.lib\nl if lib.on",
    "an output argument": 'p := parts if split("a.b", ".", parts)',
    "not in a constant set": 'allowed := {"a", "b"}\nx if not "c" in allowed',
    "a name reused in a comprehension": (
        'y := z if {\n\tx := "a"\n\tx == "a"\n\tz := [y | some x in [1, 2]; y := x * 2]\n}'
    ),
    "destructuring unification": "r if {\n\t[a, _] = [1, 2]\n\ta == 1\n}",
    "negative numbers": "n := abs(-1) + -2",
    "declared indexes": "s if {\n\tsome i, j\n\tinput.m[i][j] == 1\n}",
    "an index chain": "t if input.m[i][j] == 1",
    "a set union": 'u := {"a"} | {"b"}',
    "every over an object literal": 'w if every k, v in {"a": 1} { is_string(k); v > 0 }',
    "a function with an array parameter": "f([a, b]) := a + b\nz := f([1, 2])",
    "a rule with a reference head": "a.b.c := 1\nd := a.b.c",
    "membership with a key": 'e if "k", 1 in {"k": 1}',
    "sprintf with an array": 'm := sprintf("%v and %v", ["a", 1])',
    "count of a comprehension": "c := count({x | some x in input.xs})",
    "concat of items of unknown kinds": 'm := concat(", ", ["a", input.x, data.y])',
    "a rule constant on one definition only": (
        'table := {"A": "a"}\ntable := input.t if input.t\nm := strings.replace_n(table, "ABC")'
    ),
}

# `not` over a builtin on a value that may be undefined: true in regopy, undefined in OPA.
NEGATIONS: dict[str, str] = {
    "is_string of an absent field": "x if not is_string(input.x)",
    "startswith of an absent field": 'x if not startswith(input.x, "a")',
    "a comparison of an absent field": "x if not input.x > 1",
    "membership in an absent field": "x if not 1 in input.xs",
    "a rule without a default": "r := input.x\nx if not is_string(r)",
    "count of an absent field": "x if not count(input.x) == 1",
    "a nested call": 'x if not startswith(trim(input.x, " "), "a")',
    "an absent field in a set": 'allowed := {"a", "b"}\nx if not input.name in allowed',
}


def module(text: str) -> list[RegoFile]:
    return [RegoFile("p.rego", f"package p\n\n{text}\n")]


def refusal(modules: list[RegoFile]) -> str | None:
    try:
        check_modules(modules, IS_BUILTIN)
    except PolicyLoadError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(("text", "named"), [pytest.param(*v, id=k) for k, v in UNSAFE.items()])
def test_unsafe_variables_are_refused_as_opa_refuses_them(text: str, named: str) -> None:
    modules = module(text)
    opa_errors = compile_errors(modules)
    assert opa_errors and "rego_unsafe_var_error" in opa_errors[0]
    why = refusal(modules)
    assert why is not None and named in why
    assert f"{named.split()[1]} is unsafe" in opa_errors[0]


@pytest.mark.parametrize(("text", "named"), [pytest.param(*v, id=k) for k, v in TYPE_ERRORS.items()])
def test_type_errors_are_refused_as_opa_refuses_them(text: str, named: str) -> None:
    modules = module(text)
    opa_errors = compile_errors(modules)
    assert opa_errors and "rego_type_error" in opa_errors[0]
    why = refusal(modules)
    assert why is not None and named in why


@pytest.mark.parametrize("text", [pytest.param(v, id=k) for k, v in VALID.items()])
def test_valid_policies_pass_on_both(text: str) -> None:
    modules = module(text)
    if "import data.lib" in text:
        modules.append(RegoFile("lib.rego", "package lib\n\non := true\n"))
    assert compile_errors(modules) == []
    assert refusal(modules) is None


def _regopy_value(text: str) -> Any:
    interpreter = regopy.Interpreter()
    interpreter.add_module("p.rego", f"package p\n\n{text}\n")
    interpreter.set_input_term("{}")
    output = interpreter.query("v := data.p.x")
    return output.results[0].bindings["v"] if output.results else None


@pytest.mark.parametrize("text", [pytest.param(v, id=k) for k, v in NEGATIONS.items()])
def test_negations_whose_answer_differs_between_the_engines_are_refused(text: str) -> None:
    with opa_engine(module(text)) as engine:
        try:
            on_opa = decide(engine, "p.x", {})
        except OpaError:
            on_opa = "error"
    assert _regopy_value(text) is True
    assert on_opa is None  # the engines disagree: the check is not about a hypothetical
    why = refusal(module(text))
    assert why is not None and "may be undefined" in why


def test_the_builtin_types_table_is_opas_own() -> None:
    """builtin_types.json is OPA's capabilities reduced to kinds (python -m tests.policy.opa_reference)."""
    expected = table_text(builtin_kinds(opa_capabilities()))
    assert TABLE.read_text() == expected
    assert json.loads(expected)["functions"]["startswith"] == {
        "args": [["string"], ["string"]],
        "result": ["boolean"],
    }


# Builtins whose results differ between the engines: each shown to differ, and refused.
ENGINE_DEPENDENT: dict[str, str] = {
    "lower": 'x := lower("ÄB")',
    "upper": 'x := upper("äb")',
    "time.format": "x := time.format(0)",
}


@pytest.mark.parametrize(("builtin", "text"), ENGINE_DEPENDENT.items())
def test_builtins_whose_results_differ_between_the_engines_are_refused(builtin: str, text: str) -> None:
    with opa_engine(module(text)) as engine:
        on_opa = decide(engine, "p.x", {})
    assert _regopy_value(text) != on_opa
    why = refusal(module(text))
    assert why is not None and f"calls {builtin}, whose result differs" in why


def test_x509_parsing_is_refused() -> None:
    why = refusal(module('x := crypto.x509.parse_certificates("")'))
    assert why is not None and "whose result differs" in why


# --- every name of the shipped policy misspelled in turn -----------------------------

_NAME = re.compile(r'(?<![\w."])([A-Za-z_][A-Za-z0-9_]*)(?![\w"])')
_NOT_NAMES = frozenset(
    {"if", "in", "not", "some", "every", "contains", "else", "default", "package", "import"}
    | {"true", "false", "null", "_", "with", "as"}
)
SHIPPED = read_policy_dir(SHIPPED_POLICIES)
CHUNKS = 4


def misspellings(text: str) -> list[tuple[int, str, str]]:
    """(line, name, text with that one occurrence misspelled) for every name outside comments
    and strings."""
    lines = text.split("\n")
    found = []
    for number, line in enumerate(lines):
        code = line.split("#", 1)[0]
        for match in _NAME.finditer(code):
            if match.group(1) in _NOT_NAMES or code[: match.start()].count('"') % 2:
                continue
            changed = code[: match.start()] + match.group(1) + "x" + code[match.end() :]
            found.append(
                (number + 1, match.group(1), "\n".join([*lines[:number], changed, *lines[number + 1 :]]))
            )
    return found


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("which", ["authz.rego", "authz_test.rego"])
def test_misspelling_any_name_is_refused_exactly_when_opa_refuses(which: str, chunk: int) -> None:
    """Each refused mutant OPA refuses too, and each OPA refuses is refused, except: the checks
    also refuse a `not` whose answer the engines would differ on (OPA compiles it), and
    they do not know the kinds of a collection's elements (OPA's checker sometimes does)."""
    original = next(m for m in SHIPPED.modules if m.path == which)
    others = [m for m in SHIPPED.modules if m.path != which]
    mutants = misspellings(original.text)[chunk::CHUNKS]
    disagreements = []
    refused_by_opa = 0
    for line, name, text in mutants:
        modules = [*others, RegoFile(which, text)]
        opa_errors = compile_errors(modules)
        ours = refusal(modules)
        refused_by_opa += bool(opa_errors)
        if opa_errors and ours is None:
            if "rego_type_error" in opa_errors[0] and "array<" in opa_errors[0]:
                continue  # element kinds: see the docstring
            disagreements.append((line, name, opa_errors[0][:200], None))
        elif ours is not None and not opa_errors and "may be undefined" not in ours:
            disagreements.append((line, name, None, ours[:200]))
    assert disagreements == []
    assert refused_by_opa > len(mutants) // 3  # the corpus is mostly broken policies


_LITERAL = re.compile(r'"[^"]*"|(?<![\w.])\d+(?![\w.])|\btrue\b|\{\}|\[\]')


def literal_swaps(text: str) -> list[tuple[int, str, str]]:
    """(line, literal, text with that literal replaced by one of another kind), for each
    literal outside comments, three times: by a number (a string for a number), a boolean
    (an array for true) and an object."""
    lines = text.split("\n")
    found = []
    for number, line in enumerate(lines):
        code = "" if line.lstrip().startswith("#") else line.split("#", 1)[0]
        for match in _LITERAL.finditer(code):
            literal = match.group(0)
            other = '"1"' if literal[0].isdigit() else "1"
            for replacement in (other, "[1]" if literal == "true" else "true", "{}"):
                changed = code[: match.start()] + replacement + code[match.end() :]
                found.append(
                    (number + 1, literal, "\n".join([*lines[:number], changed, *lines[number + 1 :]]))
                )
    return found


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("which", ["authz.rego", "authz_test.rego"])
def test_a_literal_of_another_kind_is_refused_when_opa_refuses_it(which: str, chunk: int) -> None:
    """Every type error OPA finds when one literal of the shipped policy changes kind, the
    checks find too, except those OPA infers from a rule's value (a field of the decision
    object: "undefined ref", a comparison of a rule's value: "match error"); and the checks
    refuse nothing OPA accepts but a `not` whose answer the engines would differ on."""
    original = next(m for m in SHIPPED.modules if m.path == which)
    others = [m for m in SHIPPED.modules if m.path != which]
    mutants = literal_swaps(original.text)[chunk::CHUNKS]
    disagreements = []
    refused_by_both = 0
    for line, literal, text in mutants:
        modules = [*others, RegoFile(which, text)]
        opa_errors = compile_errors(modules)
        ours = refusal(modules)
        if opa_errors and ours is None:
            if "undefined ref" in opa_errors[0] or "match error" in opa_errors[0]:
                continue
            disagreements.append((line, literal, opa_errors[0][:200], None))
        elif ours is not None and not opa_errors and "may be undefined" not in ours:
            disagreements.append((line, literal, None, ours[:200]))
        refused_by_both += bool(opa_errors and ours)
    assert disagreements == []
    if which == "authz.rego":
        assert refused_by_both > 0
