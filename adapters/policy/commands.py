"""`tollgate policy test` and `tollgate policy eval`, on the embedded engine the gateway uses
(`policy test --engine opa`: the tests on OPA's own engine, see opa_tests)."""

from __future__ import annotations

from pathlib import Path

import orjson

from adapters.policy.compiled import compile_revision, static_check
from adapters.policy.opa_tests import run_tests_on_opa
from adapters.policy.rego_tests import run_rego_tests
from adapters.policy.source import PolicyLoadError, read_policy_dir
from gateway.policy.decision import MalformedDecision, parse_decision


def policy_test(directory: str, engine: str = "rego") -> int:
    """Run the *_test.rego tests: one line per test, then the summary. 0 when all pass."""
    try:
        source = read_policy_dir(directory)
        static_check(source)
        report = run_tests_on_opa(source) if engine == "opa" else run_rego_tests(source)
    except PolicyLoadError as exc:
        print(f"error: {exc}")
        return 2
    for outcome in report.outcomes:
        print(f"{'PASS' if outcome.passed else 'FAIL'}  {outcome.name}  ({outcome.file})")
    for error in report.errors:
        print(f"ERROR {error}")
    if not report.outcomes:
        print(f"no tests found in {directory} (rules named test_* in *_test.rego files)")
    print(report.summary())
    return 0 if report.passed else 1


def policy_eval(directory: str, entrypoint: str, input_path: str) -> int:
    """Print the decision for the input document in a file, and why. 0 allow, 1 deny, 2 error."""
    try:
        document = orjson.loads(Path(input_path).read_bytes())
    except OSError as exc:
        print(f"error: {input_path}: cannot read ({exc.strerror})")
        return 2
    except orjson.JSONDecodeError as exc:
        print(f"error: {input_path}: not valid JSON: {exc}")
        return 2
    if not isinstance(document, dict):
        print(f"error: {input_path}: the input document must be a JSON object")
        return 2
    try:
        compiled = compile_revision(read_policy_dir(directory), entrypoint)
    except PolicyLoadError as exc:
        print(f"error: {exc}")
        return 2
    result = compiled.evaluator().evaluate(orjson.dumps(document).decode())
    print(orjson.dumps(result.value, option=orjson.OPT_INDENT_2).decode())
    print(f"revision {compiled.revision}, entrypoint {entrypoint}, cacheable: {compiled.cacheable}")
    if result.error is not None or result.value is None:
        why = result.error or "the decision is undefined"
        print(f"DENY (no decision: {why})")
        return 1
    try:
        decision = parse_decision(result.value)
    except MalformedDecision as exc:
        print(f"DENY (malformed decision: {exc})")
        return 1
    if decision.allow:
        print("ALLOW")
        return 0
    print("DENY: " + ("; ".join(decision.reasons) or "no reason given"))
    return 1
