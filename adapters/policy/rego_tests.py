"""The policy's own tests (`*_test.rego`), run with regopy: by `tollgate policy test`, and
by the gateway before it accepts an edited policy.

A test is a rule named `test_*` in a test module; it passes when it evaluates to true.
All tests of a package are evaluated in one query, which compiles the modules once.
"""

from __future__ import annotations

from dataclasses import dataclass

import regopy
from regopy.rego_shared import rego_get_error

from adapters.policy.compiled import add_source
from adapters.policy.rego_checks import module_facts
from adapters.policy.rego_tokens import tokens
from adapters.policy.source import PolicySource

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
    interpreter = regopy.Interpreter()
    add_source(interpreter, source, tests=True)
    outcomes: list[TestOutcome] = []
    errors: list[str] = []
    for package, tests in tests_by_package.items():
        results, error = _evaluate_package(interpreter, package)
        if error is not None:
            errors.append(f"{package}: {error}")
        outcomes.extend(
            TestOutcome(f"{package}.{name}", path, results.get(name) is True) for name, path in tests
        )
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
