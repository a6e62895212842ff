"""The policy's Rego tests on OPA's own engine: `tollgate policy test --engine opa`.

It runs through the optional package `opa-golib-python-bindings` (OPA 1.x's Go engine as
a shared library, in process). That package is not a dependency of the gateway: it
declares Python >= 3.14 though it loads on 3.11, so it is installed on request with
`pip install --ignore-requires-python 'opa-golib-python-bindings>=0.4.4'`.
"""

from __future__ import annotations

import importlib
from typing import Any

from adapters.policy.rego_checks import module_facts
from adapters.policy.rego_tests import TestOutcome, TestReport, rego_test_names
from adapters.policy.source import PolicyLoadError, PolicySource

INSTALL_HINT = (
    "running the tests on OPA's engine needs the package opa-golib-python-bindings: "
    "pip install --ignore-requires-python 'opa-golib-python-bindings>=0.4.4'"
)


def run_tests_on_opa(source: PolicySource) -> TestReport:
    """Raises PolicyLoadError when the bindings are not installed."""
    try:
        bindings: Any = importlib.import_module("opa_bindings")
    except ImportError:
        raise PolicyLoadError(INSTALL_HINT) from None
    outcomes: list[TestOutcome] = []
    errors: list[str] = []
    engine = bindings.OpaEngine()
    try:
        try:
            for module in source.modules:
                engine.add_policy(module.path, module.text)
            engine.add_data(source.data)
        except bindings.OpaError as exc:
            return TestReport((), (f"OPA refused the policy: {exc.message}",))
        for module in source.test_modules:
            package = module_facts(module).package
            try:
                results = engine.eval_document(package)
            except bindings.OpaUndefinedError:
                results = {}
            except bindings.OpaError as exc:
                errors.append(f"{package}: the tests could not be evaluated: {exc.message}")
                results = {}
            outcomes.extend(
                TestOutcome(f"{package}.{name}", module.path, results.get(name) is True)
                for name in rego_test_names(module.text)
            )
    finally:
        engine.close()
    return TestReport(tuple(outcomes), tuple(errors))
