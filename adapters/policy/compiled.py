"""A policy revision compiled by regopy, and the evaluators that run it.

A revision is compiled once, into a bundle saved as a file; each evaluation thread loads
its own interpreter from that file (well under a millisecond), because a regopy
interpreter holds its input and must not be shared between threads, and two threads
sharing one bundle object do not run in parallel. regopy releases the GIL while it
evaluates, so evaluations in different threads do.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import regopy
from regopy.rego_shared import rego_get_error

from adapters.policy.rego_checks import check_modules, module_facts
from adapters.policy.rego_rules import Rule
from adapters.policy.source import PolicyLoadError, PolicySource

_BUNDLE_FILE = "bundle.rbb"
_ERROR = re.compile(r"\(error \d+:([^|]*)\|(\d+)\|\d+\s*\(errormsg \d+:([^)\n]*)\)")


@dataclass(frozen=True, slots=True)
class Evaluation:
    value: Any  # None when undefined
    error: str | None = None
    failed: bool = False  # the evaluation itself failed (a rule conflict): no decision at all


@dataclass(eq=False)
class CompiledRevision:
    revision: str
    entrypoint: str  # e.g. "gateway/authz/decision"
    cacheable: bool
    uncacheable_calls: tuple[str, ...]
    workdir: str = field(repr=False)  # holds the bundle file; removed with this object
    # Rules with more than one definition, the only ones that can conflict: also bundle
    # entrypoints, so that a failed evaluation can name the rule (regopy's error does not).
    multi_defined: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        weakref.finalize(self, shutil.rmtree, self.workdir, ignore_errors=True)

    @property
    def bundle_path(self) -> str:
        return str(Path(self.workdir) / _BUNDLE_FILE)

    def evaluator(self) -> Evaluator:
        """A new interpreter for this revision: one per thread."""
        return Evaluator(self)


class Evaluator:
    def __init__(self, compiled: CompiledRevision) -> None:
        self.compiled = compiled
        self._interpreter = regopy.Interpreter()
        self._bundle = self._interpreter.load_bundle(compiled.bundle_path, regopy.BundleFormat.Binary)

    def evaluate(self, input_json: str) -> Evaluation:
        interpreter = self._interpreter
        try:
            interpreter.set_input_term(input_json)
            output = interpreter.query_bundle_entrypoint(self._bundle, self.compiled.entrypoint)
        except regopy.RegoError as exc:
            return Evaluation(None, f"evaluation failed: {exc}", failed=True)
        except ValueError:
            # regopy's own JSON decoding of the result failed (see docs/policies.md, "Traps").
            return Evaluation(None, "the engine produced output that is not JSON")
        if not output.ok():
            return Evaluation(None, self._why_failed(), failed=True)
        if not output.results or not output.results[0].expressions:
            return Evaluation(None)
        return Evaluation(output.results[0].expressions[0])

    def _why_failed(self) -> str:
        """Which rule failed, found by evaluating each rule that could conflict (error path only)."""
        detail = _syntax_error(rego_get_error(self._interpreter._impl))
        failing = []
        for path in self.compiled.multi_defined:
            try:
                ok = self._interpreter.query_bundle_entrypoint(self._bundle, path).ok()
            except (regopy.RegoError, ValueError):
                ok = False
            if not ok:
                failing.append(path.replace("/", "."))
        if not failing:
            return f"evaluation failed: {detail}"
        return (
            f"evaluation failed: rule {', '.join(failing)} has more than one value for this input "
            "(its definitions conflict)"
        )


def compile_revision(source: PolicySource, entrypoint: str) -> CompiledRevision:
    """Check and compile the policy modules (not the tests) with the data. Raises PolicyLoadError."""
    uncacheable = static_check(source)
    multi_defined = multi_defined_rules(source)
    interpreter = regopy.Interpreter()
    add_source(interpreter, source, tests=False)
    bundle = interpreter.build(None, [entrypoint, *(p for p in multi_defined if p != entrypoint)])
    if not bundle.ok():
        raise PolicyLoadError(f"{source.directory}: {_syntax_error(rego_get_error(interpreter._impl))}")
    workdir = tempfile.mkdtemp(prefix="tollgate-policy-")
    interpreter.save_bundle(str(Path(workdir) / _BUNDLE_FILE), bundle, regopy.BundleFormat.Binary)
    return CompiledRevision(
        source.revision, entrypoint, not uncacheable, tuple(uncacheable), workdir, multi_defined
    )


def multi_defined_rules(source: PolicySource) -> tuple[str, ...]:
    """Entrypoint paths ("gateway/authz/reasons") of complete rules that more than one
    statement defines (a `default` aside): a conflict can only come from one of them."""
    counts: dict[str, int] = {}
    for module in source.policy_modules:
        facts = module_facts(module)
        for rule in facts.rules:
            if rule.is_function or rule.has_default or _is_partial_set(rule):
                continue
            path = f"{facts.package.replace('.', '/')}/{rule.name}"
            counts[path] = counts.get(path, 0) + 1
    return tuple(sorted(path for path, count in counts.items() if count > 1))


def static_check(source: PolicySource) -> list[str]:
    """The checks of rego_checks on every module, tests included; returns the uncacheable calls."""
    return check_modules(source.modules, regopy.Interpreter().is_builtin)


def add_source(interpreter: regopy.Interpreter, source: PolicySource, *, tests: bool) -> None:
    for module in source.modules if tests else source.policy_modules:
        try:
            interpreter.add_module(module.path, module.text)
        except regopy.RegoError as exc:
            raise PolicyLoadError(f"{module.path}: {_syntax_error(str(exc), module.text)}") from None
    try:
        interpreter.add_data_json(orjson.dumps(source.data).decode())
    except regopy.RegoError as exc:
        why = _syntax_error(str(exc))
        raise PolicyLoadError(f"{source.directory}: the data was refused: {why}") from None


def _is_partial_set(rule: Rule) -> bool:
    """`name contains x`: a set's members never conflict (partial objects' values can)."""
    return len(rule.tokens) > 1 and rule.tokens[1].text == "contains"


def _syntax_error(message: str, text: str = "") -> str:
    """regopy's error, e.g. `(error 6:p.rego|19|2 (errormsg 16:this is unclosed) ...)`, as
    "this is unclosed (line 2)"; the first error only."""
    match = _ERROR.search(message)
    if match is None:
        return _first_line(message)
    offset, what = int(match.group(2)), match.group(3)
    return f"{what} (line {text.count(chr(10), 0, offset) + 1})" if text else what


def _first_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip() and line.strip() != "Errors:"]
    return lines[0] if lines else "unknown error"
