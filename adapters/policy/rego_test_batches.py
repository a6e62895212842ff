"""The policy's tests split into small batches, each compiled on its own, to bound the
memory a test run takes.

regopy compiles a `with` by copying the rules it overrides (for `with input.x as ...`,
every rule that reads the input), and keeps every copy until the interpreter is gone: the
shipped tests (212 `with`s) took one interpreter to 4 GB. The CPU is the same whether the
tests are compiled together or apart (it is per `with`), so they are compiled in batches
of a few tests, in one interpreter each, freed before the next: the peak is one batch's.

A batch is the test modules with every test rule outside the batch blanked out (its lines
emptied, so that line numbers stay as written). A test's result is then what it is with
all tests compiled together, provided nothing refers to another test: batching is used
only when no module names a test rule other than by defining it, nor a test package as a
whole (`data.gateway`, `data.gateway.authz_test[k]`, `data[x]`); otherwise, and whenever a
batch reports an error, the tests are run together, as one query per package.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from adapters.policy.rego_checks import module_facts
from adapters.policy.rego_tokens import Token, tokens
from adapters.policy.source import PolicySource, RegoFile

MAX_WITHS_PER_BATCH = 8  # the shipped tests: 33 batches, about 430 MB at the peak (docs/benchmarks.md)


def batches(source: PolicySource, tests: Sequence[str]) -> list[list[str]] | None:
    """The test rule names (`test_*`, of any package) in batches of at most
    MAX_WITHS_PER_BATCH `with`s (a test with more is a batch of its own); None when the
    tests must be compiled together."""
    if not tests or refers_to_tests(source, set(tests)):
        return None
    withs = _withs_per_test(source.test_modules)
    found: list[list[str]] = []
    current: list[str] = []
    count = 0
    for name in tests:
        if current and count + withs.get(name, 0) > MAX_WITHS_PER_BATCH:
            found.append(current)
            current, count = [], 0
        current.append(name)
        count += withs.get(name, 0)
    if current:
        found.append(current)
    return found


def source_for_batch(source: PolicySource, all_tests: set[str], batch: Iterable[str]) -> PolicySource:
    """The source with every test rule not in `batch` blanked out of the test modules."""
    drop = all_tests - set(batch)
    modules = tuple(RegoFile(m.path, _blank_rules(m.text, drop)) if m.is_test else m for m in source.modules)
    return replace(source, modules=modules)


def refers_to_tests(source: PolicySource, tests: set[str]) -> bool:
    """Whether any module could read a test rule other than through its own definition."""
    test_packages = {module_facts(m).package for m in source.test_modules}
    for module in source.modules:
        facts = module_facts(module)
        toks = tokens(module.text)
        heads = {id(tok) for tok in _statement_starts(toks)}
        for index, tok in enumerate(toks):
            if tok.kind != "name" or id(tok) in heads or _in_package_line(toks, index):
                continue
            parts = tok.text.split(".")
            if any(part in tests for part in parts):
                return True
            path = _data_path(parts, facts.package, facts.imports)
            if path is None:
                continue
            whole = ".".join(path)
            for package in test_packages:
                if package == whole or package.startswith(f"{whole}.") or not whole:
                    return True
    return False


def _data_path(parts: list[str], package: str, imports: dict[str, str]) -> list[str] | None:
    """The path under `data` a name refers to (["gateway", "authz"]), or None when it is not
    a reference into data (a local variable, `input`, a builtin)."""
    if parts[0] == "data":
        return parts[1:]
    if parts[0] in imports:
        return [*imports[parts[0]].split("."), *parts[1:]]
    return None


def _withs_per_test(test_modules: Iterable[RegoFile]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for module in test_modules:
        toks = tokens(module.text)
        name = ""
        for tok in toks:
            if _starts_statement(tok):
                name = tok.text
            elif tok.text == "with" and name:
                counts[name] = counts.get(name, 0) + 1
    return counts


def _blank_rules(text: str, names: set[str]) -> str:
    """The text with the statements that define any of `names` replaced by empty lines."""
    toks = tokens(text)
    starts = _statement_starts(toks)
    lines = text.split("\n")
    for start, following in zip(starts, [*starts[1:], None], strict=True):
        if start.text not in names:
            continue
        end = following.line - 1 if following is not None else len(lines)
        for number in range(start.line, end + 1):
            lines[number - 1] = ""
    return "\n".join(lines)


def _statement_starts(toks: Sequence[Token]) -> list[Token]:
    return [tok for tok in toks if _starts_statement(tok)]


def _starts_statement(tok: Token) -> bool:
    """As adapters.policy.rego_rules splits a module into statements."""
    return tok.depth == 0 and tok.line_start and tok.kind == "name" and tok.text != "else"


def _in_package_line(toks: Sequence[Token], index: int) -> bool:
    return index > 0 and toks[index - 1].text in ("package", "import")
