"""OPA's own Rego engine in process, as the reference the embedded engine and the loader's
checks are held to.

`opa-golib-python-bindings` embeds OPA 1.x's Go engine as a shared library. It declares
Python >= 3.14 but loads on 3.11, so scripts/test.sh installs it with
`--ignore-requires-python` (it cannot be in pyproject's test extra). A missing package
is an ImportError when the tests are collected: the conformance tests fail, never skip.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opa_bindings import OpaEngine, OpaError, OpaUndefinedError

from adapters.policy.rego_checks import module_facts
from adapters.policy.rego_tests import rego_test_names
from adapters.policy.source import PolicySource, RegoFile

__all__ = ["OpaEngine", "OpaError", "compile_errors", "decide", "opa_engine", "run_opa_tests"]


def opa_engine(modules: Iterable[RegoFile], data: dict[str, Any] | None = None) -> OpaEngine:
    engine = OpaEngine()
    for module in modules:
        engine.add_policy(module.path, module.text)
    if data:
        engine.add_data(data)
    return engine


def compile_errors(modules: Iterable[RegoFile]) -> list[str]:
    """OPA's compile errors for these modules ([] when OPA compiles them): OPA compiles when
    it first evaluates, so the whole data document is evaluated once."""
    try:
        engine = opa_engine(modules)
    except OpaError as exc:
        return [exc.message]
    with engine:
        try:
            engine.eval_query("x := data")
        except OpaError as exc:
            if exc.code in ("prepare_error", "compile_error", "parse_error"):
                return [exc.message]
            # Evaluation errors (a conflict) mean the modules compiled.
    return []


def decide(engine: OpaEngine, path: str, document: dict[str, Any]) -> Any:
    """The value at data.<path> ("gateway.authz.decision") for this input; None when undefined."""
    try:
        return engine.eval_document(path, document)
    except OpaUndefinedError:
        return None


def run_opa_tests(source: PolicySource) -> dict[str, bool]:
    """Every test_* rule of the test modules, by package.rule: whether it evaluated to true."""
    results: dict[str, bool] = {}
    with opa_engine(source.modules, source.data) as engine:
        for module in source.test_modules:
            package = module_facts(module).package
            value = decide(engine, package, {}) or {}
            for name in rego_test_names(module.text):
                results[f"{package}.{name}"] = value.get(name) is True
    return results
