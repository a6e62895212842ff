"""What mypyc compiles differently from CPython, checked in the sources setup.py compiles
(docs/architecture.md, Compiled request path): code that runs right as plain Python and
wrong, or not at all, compiled."""

from __future__ import annotations

import ast
import runpy
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE_IN_SLICES = {"len", "max", "min", "int"}


def _compiled() -> list[str]:
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="not_main")
    return list(setup["compiled_modules"]())


COMPILED = _compiled()


def _tree(module: str) -> ast.Module:
    return ast.parse((ROOT / module).read_text(), module)


def test_the_request_path_is_compiled() -> None:
    assert "gateway/forward.py" in COMPILED and "gateway/metering/meter.py" in COMPILED
    assert not any(module.endswith("__init__.py") for module in COMPILED)


@pytest.mark.parametrize("module", COMPILED)
def test_an_except_name_keeps_one_type_in_a_function(module: str) -> None:
    """Compiled, a name bound by `except A as e` keeps A's type for the whole function: a
    later `except B as e` that catches something else raises TypeError."""
    for function in ast.walk(_tree(module)):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            types: defaultdict[str, set[str]] = defaultdict(set)
            for node in ast.walk(function):
                if isinstance(node, ast.ExceptHandler) and node.name:
                    types[node.name].add(ast.unparse(node.type) if node.type else "BaseException")
            reused = {name: sorted(kinds) for name, kinds in types.items() if len(kinds) > 1}
            assert not reused, f"{module}: {function.name}: {reused}"


@pytest.mark.parametrize("module", COMPILED)
def test_no_call_with_effects_in_a_slice(module: str) -> None:
    """Compiled, a slice's bounds are evaluated twice."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Slice):
            for bound in (node.lower, node.upper, node.step):
                for call in ast.walk(bound) if bound is not None else ():
                    if isinstance(call, ast.Call):
                        name = call.func.id if isinstance(call.func, ast.Name) else None
                        assert name in PURE_IN_SLICES, f"{module}:{node.lineno}: {ast.unparse(call)}"


@pytest.mark.parametrize("module", COMPILED)
def test_fields_name_only_classes_defined_before(module: str) -> None:
    """Compiled, a class's field annotations are read at import: a class named there must
    exist by then."""
    tree = _tree(module)
    defined = {node.name: node.lineno for node in tree.body if isinstance(node, ast.ClassDef)}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        for field in (statement for statement in cls.body if isinstance(statement, ast.AnnAssign)):
            named = {n.id for n in ast.walk(field.annotation) if isinstance(n, ast.Name)}
            later = {name for name in named if defined.get(name, 0) >= cls.lineno}
            assert not later, f"{module}:{field.lineno}: {cls.name} names {later} before they exist"


@pytest.mark.parametrize("module", COMPILED)
def test_no_copy_of_a_compiled_object(module: str) -> None:
    """A compiled class has no copy or pickle support."""
    source = (ROOT / module).read_text()
    assert "copy.copy(" not in source and "copy.deepcopy(" not in source, module


def _awaits(statements: list[ast.stmt]) -> int | None:
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Await, ast.AsyncWith, ast.AsyncFor)):
                return node.lineno
    return None


@pytest.mark.parametrize("module", COMPILED)
def test_no_await_in_a_finally_block(module: str) -> None:
    """Compiled, a coroutine awaited by compiled code loses the exception passing through a
    `finally` block that suspends: the coroutine returns as if nothing had been raised."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Try | ast.TryStar) and node.finalbody:
            line = _awaits(node.finalbody)
            assert line is None, f"{module}:{line}: an await in the finally block of line {node.lineno}"


@pytest.mark.parametrize("module", COMPILED)
def test_an_except_block_that_awaits_reraises_by_name(module: str) -> None:
    """Compiled, a bare `raise` after an await in the same except block loses the exception
    (or crashes the process): `raise exc` names it."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ExceptHandler) and _awaits(node.body) is not None:
            for statement in node.body:
                for inner in ast.walk(statement):
                    assert not (isinstance(inner, ast.Raise) and inner.exc is None), (
                        f"{module}:{inner.lineno}: a bare raise in an except block that awaits"
                    )
