"""OPA's own Rego engine in process, as the reference the embedded engine and the loader's
checks are held to.

`opa-golib-python-bindings` embeds OPA 1.x's Go engine as a shared library. It declares
Python >= 3.14 but loads on 3.11, so scripts/test.sh installs it with
`--ignore-requires-python` (it cannot be in pyproject's test extra). A missing package
is an ImportError when the tests are collected: the conformance tests fail, never skip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opa_bindings import OpaEngine, OpaError, OpaUndefinedError

from adapters.policy.rego_checks import module_facts
from adapters.policy.rego_tests import rego_test_names
from adapters.policy.rego_types import TABLE
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


def opa_capabilities() -> dict[str, Any]:
    """OPA's capabilities document (every builtin with its declaration) for the embedded
    OPA: the bindings' library carries one per OPA release; the newest has the most builtins."""
    import opa_bindings

    library = Path(opa_bindings.__file__).with_name("libopabridge.so").read_bytes()
    decoder = json.JSONDecoder()
    found = []
    for match in re.finditer(rb'\{\n  "builtins": \[', library):
        text = library[match.start() : match.start() + 1_000_000].decode("utf-8", errors="replace")
        found.append(decoder.raw_decode(text)[0])
    return max(found, key=lambda doc: len(doc["builtins"]))


def builtin_kinds(capabilities: dict[str, Any]) -> dict[str, Any]:
    """The capabilities reduced to what the loader's type checks read: per builtin, the kinds
    of value each argument and the result may be, and the infix operators' builtins."""
    functions = {}
    operators = {}
    for builtin in capabilities["builtins"]:
        decl = builtin.get("decl", {})
        if decl.get("type") != "function" or builtin.get("deprecated"):
            continue
        functions[builtin["name"]] = {
            "args": [_kinds(arg) for arg in decl.get("args", [])],
            "result": _kinds(decl.get("result", {"type": "any"})),
        }
        if builtin.get("infix"):
            operators[builtin["infix"]] = builtin["name"]
    return {"functions": dict(sorted(functions.items())), "operators": dict(sorted(operators.items()))}


def table_text(table: dict[str, Any]) -> str:
    """The table as builtin_types.json holds it: one line per builtin, for readable diffs."""
    lines = [f"  {json.dumps(name)}: {json.dumps(decl)}" for name, decl in table["functions"].items()]
    return (
        '{"functions": {\n'
        + ",\n".join(lines)
        + '\n},\n"operators": '
        + json.dumps(table["operators"])
        + "}\n"
    )


def _kinds(decl: dict[str, Any]) -> list[str]:
    """ "string", "array", or "array[number|string]": a collection with the kinds of its
    items (an object: of its values), one level deep; none given: any items."""
    kind = decl.get("type", "any")
    if kind == "any":
        of = decl.get("of")
        if not isinstance(of, list):
            return ["any"]
        return sorted({k for item in of for k in _kinds(item)})
    items = _item_kinds(decl)
    return [f"{kind}[{'|'.join(items)}]" if items else kind]


def _item_kinds(decl: dict[str, Any]) -> list[str]:
    kind = decl["type"]
    if kind == "array":
        items = ([decl["dynamic"]] if "dynamic" in decl else []) + list(decl.get("static") or [])
    elif kind == "set":
        items = [decl["of"]] if "of" in decl else []
    elif kind == "object":
        dynamic = decl.get("dynamic")
        items = ([dynamic["value"]] if dynamic else []) + [f["value"] for f in decl.get("static") or []]
    else:
        return []
    kinds = {k.split("[", 1)[0] for item in items for k in _kinds(item)}
    return [] if not kinds or "any" in kinds else sorted(kinds)


if __name__ == "__main__":
    # python -m tests.policy.opa_reference: rewrite the loader's table of builtin types.
    TABLE.write_text(table_text(builtin_kinds(opa_capabilities())))
