"""What the loader refuses before regopy compiles, and what turns the decision cache off."""

from __future__ import annotations

import pytest
import regopy

from adapters.policy.rego_checks import check_modules
from adapters.policy.source import PolicyLoadError, RegoFile

IS_BUILTIN = regopy.Interpreter().is_builtin


def check(*texts: str) -> list[str]:
    return check_modules([RegoFile(f"m{i}.rego", t) for i, t in enumerate(texts)], IS_BUILTIN)


@pytest.mark.parametrize(
    "text",
    [
        'package p\ndeny[msg] { msg := "x" }',
        "package p\nallow { true }",
        "package p\nf(x) { x }",
        "package p\np = 1 { true }",
        "package p\nx := 1 if { false } else { true }",
        "package p\nimport future.keywords.if\nallow if true",
        'package p\ndeny contains "x" {\n  true\n}',
    ],
)
def test_rego_v0_syntax_is_refused(text: str) -> None:
    with pytest.raises(PolicyLoadError, match=r"Rego v0|Rego v1"):
        check(text)


def test_rego_v1_forms_pass() -> None:
    text = """package p
import rego.v1
default allow := false
allow if { true }
x := {"a": 1}
s := {v | some v in [1, 2]}
d contains {"m": 1} if true
z if every v in [1] { v > 0 }
q := 1 if { false } else := 2
# a comment with { braces } and allow { v0 }
msg := "a { string"
t if data.p.allow with input.x as {"a": 1}
"""
    assert check(text) == []


@pytest.mark.parametrize(
    "call",
    [
        'net.cidr_contains("10.0.0.0/8", input.ip)',
        'http.send({"url": "u"})',
        'time.parse_rfc3339_ns("x")',
        "json.match_schema({}, {})",
        'strings.render_template("x", {})',
    ],
)
def test_builtins_regopy_reads_as_undefined_are_refused(call: str) -> None:
    with pytest.raises(PolicyLoadError, match="evaluates as undefined"):
        check(f"package p\nallow if {call}")


def test_an_unknown_function_is_refused() -> None:
    with pytest.raises(PolicyLoadError, match=r"foo\.bar, which is neither defined here nor a builtin"):
        check("package p\nallow if foo.bar(1)")


def test_functions_defined_in_the_policy_resolve_across_packages() -> None:
    lib = "package lib\nf(x) := x + 1"
    user = (
        "package q\nimport data.lib\nimport data.lib as other\n"
        "allow if { lib.f(1) == 2; other.f(1) == 2; data.lib.f(1) == 2 }"
    )
    assert check(lib, user) == []
    with pytest.raises(PolicyLoadError, match=r"lib\.g, which no module defines"):
        check(lib, "package q\nimport data.lib\nallow if lib.g(1)")


def test_sprintf_q_is_refused() -> None:
    with pytest.raises(PolicyLoadError, match="%q"):
        check('package p\nm := sprintf("%q", ["a"])')


@pytest.mark.parametrize("call", ["time.now_ns()", 'rand.intn("x", 10)', 'uuid.rfc4122("x")'])
def test_time_and_randomness_make_a_policy_uncacheable(call: str) -> None:
    assert check(f"package p\nv := {call}") == [call.split("(", maxsplit=1)[0]]


def test_the_shipped_policy_passes_and_is_cacheable() -> None:
    from adapters.policy.source import read_policy_dir
    from tests.policy.conftest import SHIPPED_POLICIES

    assert check_modules(read_policy_dir(SHIPPED_POLICIES).modules, IS_BUILTIN) == []
