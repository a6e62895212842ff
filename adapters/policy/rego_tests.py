"""The policy's own tests (`*_test.rego`), run with regopy: by `tollgate policy test`, and
by the gateway before it accepts an edited policy.

A test is a rule named `test_*` in a test module; it passes when it evaluates to true.
The tests are compiled in small batches, one interpreter each, to bound the memory
(adapters.policy.rego_test_batches); each batch's tests of a package are evaluated in one
query. When batching cannot be shown to give the same results, or any batch fails, all
tests are compiled together and evaluated in one query per package.
"""

from __future__ import annotations

from dataclasses import dataclass

import regopy
from regopy.rego_shared import rego_get_error

from adapters.policy.compiled import add_source
from adapters.policy.rego_checks import module_facts
from adapters.policy.rego_test_batches import batches, source_for_batch
from adapters.policy.rego_tokens import tokens
from adapters.policy.source import PolicyLoadError, PolicySource

# What regopy says when a test uses `with input as {...}` on a rule that calls a builtin.
_WITH_INPUT_SYMPTOMS = ("rego-with", "rego-localref", "rego-refhead")
_WITH_INPUT_HINT = (
    " (the embedded engine cannot evaluate `with input as {...}` when the rule under test calls a "
    'builtin: set the fields one by one, e.g. `with input.tenant as "demo" with input.model as "m"`)'
)


@dataclass(frozen=True, slots=True)
class TestOutcome:
    name: str  # package.rule, e.g. gateway.authz_test.test_unknown_tenant_is_denied
    file: str
    passed: bool


@dataclass(frozen=True, slots=True)
class TestReport:
    outcomes: tuple[TestOutcome, ...]
    errors: tuple[str, ...]  # a package whose tests could not be evaluated at all

    @property
    def passed(self) -> bool:
        return not self.errors and all(o.passed for o in self.outcomes)

    @property
    def failed(self) -> list[TestOutcome]:
        return [o for o in self.outcomes if not o.passed]

    def summary(self) -> str:
        passed = sum(o.passed for o in self.outcomes)
        return f"{passed} passed, {len(self.outcomes) - passed} failed"


def run_rego_tests(source: PolicySource) -> TestReport:
    """Raises PolicyLoadError when the modules themselves cannot be loaded."""
    tests_by_package: dict[str, list[tuple[str, str]]] = {}
    for module in source.test_modules:
        facts = module_facts(module)
        names = rego_test_names(module.text)
        tests_by_package.setdefault(facts.package, []).extend((name, module.path) for name in names)
    if not tests_by_package:
        return TestReport((), ())
    names = list(dict.fromkeys(name for tests in tests_by_package.values() for name, _ in tests))
    plan = batches(source, names)
    if plan is not None and len(plan) > 1:
        results = _run_in_batches(source, tests_by_package, plan, set(names))
        if results is not None:
            return _report(tests_by_package, results, [])
    return _run_together(source, tests_by_package)


def _run_together(source: PolicySource, tests_by_package: dict[str, list[tuple[str, str]]]) -> TestReport:
    """All tests in one interpreter, one query per package."""
    interpreter = regopy.Interpreter()
    add_source(interpreter, source, tests=True)
    results: dict[str, dict[str, object]] = {}
    errors: list[str] = []
    for package in tests_by_package:
        results[package], error = _evaluate_package(interpreter, package)
        if error is not None:
            errors.append(f"{package}: {error}")
    return _report(tests_by_package, results, errors)


def _run_in_batches(
    source: PolicySource,
    tests_by_package: dict[str, list[tuple[str, str]]],
    plan: list[list[str]],
    all_tests: set[str],
) -> dict[str, dict[str, object]] | None:
    """Each batch in an interpreter of its own (see rego_test_batches); None when any batch
    fails to load or evaluate, for the tests to be run together and the error reported as such."""
    results: dict[str, dict[str, object]] = {package: {} for package in tests_by_package}
    for batch in plan:
        members = set(batch)
        interpreter = regopy.Interpreter()
        try:
            add_source(interpreter, source_for_batch(source, all_tests, batch), tests=True)
        except PolicyLoadError:
            return None
        for package, tests in tests_by_package.items():
            if not any(name in members for name, _ in tests):
                continue
            values, error = _evaluate_package(interpreter, package)
            if error is not None:
                return None
            results[package].update((name, values.get(name)) for name, _ in tests if name in members)
        del interpreter  # this batch's copies of the rules go before the next batch's are made
    return results


def _report(
    tests_by_package: dict[str, list[tuple[str, str]]],
    results: dict[str, dict[str, object]],
    errors: list[str],
) -> TestReport:
    outcomes = [
        TestOutcome(f"{package}.{name}", path, results.get(package, {}).get(name) is True)
        for package, tests in tests_by_package.items()
        for name, path in tests
    ]
    return TestReport(tuple(outcomes), tuple(errors))


def _evaluate_package(interpreter: regopy.Interpreter, package: str) -> tuple[dict[str, object], str | None]:
    try:
        output = interpreter.query(f"x := data.{package}")
    except (regopy.RegoError, ValueError) as exc:
        return {}, f"the tests could not be evaluated: {str(exc).strip()[:300]}"
    if not output.ok():
        message = rego_get_error(interpreter._impl).strip()
        hint = _WITH_INPUT_HINT if any(s in message for s in _WITH_INPUT_SYMPTOMS) else ""
        return {}, f"the tests could not be evaluated: {message[:300]}{hint}"
    if not output.results:
        return {}, None
    value = output.results[0].bindings.get("x")
    return (value, None) if isinstance(value, dict) else ({}, None)


def rego_test_names(text: str) -> list[str]:
    names: dict[str, None] = {}
    for tok in tokens(text):
        if tok.kind == "name" and tok.depth == 0 and tok.line_start and tok.text.startswith("test_"):
            names[tok.text] = None
    return list(names)


def describe(report: TestReport) -> str:
    """One line: the summary, the failed tests and the errors, for logs and refusals."""
    parts = [report.summary()]
    if report.failed:
        parts.append("failed: " + ", ".join(o.name for o in report.failed))
    parts.extend(report.errors)
    return "; ".join(parts)
