"""Checks made on policy text before the embedded engine (regopy) compiles it.

regopy accepts some text it then evaluates differently from OPA, silently:
- Rego v0 syntax is read with v1 meaning (a v0 partial-set rule `p[x] { ... }` becomes a
  partial object, and a deny set can come out empty): a rule body without `if` and
  `import future.keywords` are refused.
- Some builtins evaluate to undefined instead of failing (net.*, http.send, ...), and an
  unknown function makes the result unparsable: every call must name a function defined
  in the policy or a builtin regopy implements.
- `sprintf("%q", ...)` prints a literal %q.
- Some builtins give other results than OPA's (`lower` on non-ASCII letters, `time.format`):
  refused, so that the same files decide the same on both engines.
- What OPA's compiler refuses, regopy loads and then never fires: unsafe variables and
  type errors (rego_safety, rego_types), refused here.
And some builtins make a decision depend on more than its input (time, randomness, the
network): they are allowed, but turn the decision cache off for that revision.

The scan works on tokens with comments and string contents removed; it is not a parser,
only sure enough for these checks (docs/policies.md lists them for policy authors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from adapters.policy.rego_rules import Rule, rules
from adapters.policy.rego_safety import Scope, undefined_under_not, unsafe_variables
from adapters.policy.rego_tokens import Token, tokens
from adapters.policy.rego_types import Kinds, rule_kinds, type_errors
from adapters.policy.source import PolicyLoadError, RegoFile

# Builtins regopy reports as available but evaluates as undefined.
UNSUPPORTED = frozenset(
    {"time.parse_rfc3339_ns", "json.match_schema", "json.verify_schema", "strings.render_template"}
)
UNSUPPORTED_FAMILIES = ("net.", "http.", "graphql.", "rego.metadata.")

# Builtins whose result differs between regopy and OPA (measured), with how.
ENGINE_DEPENDENT = {
    "lower": "OPA lowers every letter, the embedded engine only A-Z; for ASCII use "
    'strings.replace_n({"A": "a", ...}, s)',
    "upper": "OPA raises every letter, the embedded engine only a-z; for ASCII use "
    'strings.replace_n({"a": "A", ...}, s)',
    "time.format": "the engines format fractions of a second differently",
    "crypto.x509.parse_certificates": "the engines parse certificates into different objects",
}

# Builtins whose result depends on something other than the input and data.
UNCACHEABLE = frozenset(
    {
        "time.now_ns",
        "rand.intn",
        "uuid.rfc4122",
        "http.send",
        "net.lookup_ip_addr",
        "opa.runtime",
        "io.jwt.decode_verify",
        "crypto.x509.parse_and_verify_certificates",
        "crypto.x509.parse_and_verify_certificates_with_options",
    }
)

_KEYWORDS = frozenset(
    {"if", "in", "not", "some", "every", "contains", "else", "with", "as", "default", "import", "package"}
)
# After these a `{` opens a value (object, set, comprehension), not a rule body.
_VALUE_CONTEXT = frozenset(
    {":=", "=", "==", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "&", "|", ",", "(", "[", "{", ":"}
    | {"contains", "in", "as", "not", "if", "default"}
)


@dataclass(frozen=True, slots=True)
class ModuleFacts:
    file: RegoFile
    package: str
    imports: dict[str, str]  # alias -> imported path without "data."
    functions: frozenset[str]  # functions this module defines, unqualified
    calls: tuple[tuple[str, int], ...]  # (called name, line)
    aliases: frozenset[str]  # every name an import brings in (data and input imports)
    rules: tuple[Rule, ...]


def module_facts(file: RegoFile) -> ModuleFacts:
    try:
        toks = tokens(file.text)
    except PolicyLoadError as exc:
        raise PolicyLoadError(f"{file.path}: {exc}") from None
    _refuse_v0(file, toks)
    package, imports, aliases, functions, calls = "", {}, set(), set(), []
    for index, tok in enumerate(toks):
        following = toks[index + 1] if index + 1 < len(toks) else None
        if tok.text == "package" and following is not None:
            package = following.text
        elif tok.text == "import" and following is not None and following.text.startswith(("data", "input")):
            alias = following.text.rsplit(".", 1)[-1]
            after = toks[index + 2 : index + 4]
            if len(after) == 2 and after[0].text == "as":
                alias = after[1].text
            aliases.add(alias)
            if following.text.startswith("data."):
                imports[alias] = following.text[len("data.") :]
        elif tok.kind == "name" and following is not None and following.text == "(":
            if tok.text in _KEYWORDS:
                continue
            if tok.depth == 0 and tok.line_start:
                functions.add(tok.text)
            else:
                calls.append((tok.text, tok.line))
    if not package:
        raise PolicyLoadError(f"{file.path}: no package declaration")
    return ModuleFacts(
        file, package, imports, frozenset(functions), tuple(calls), frozenset(aliases), tuple(rules(toks))
    )


def check_modules(modules: Iterable[RegoFile], is_builtin: Callable[[str], bool]) -> list[str]:
    """Every module's problems, and the uncacheable builtins it calls.

    Returns the names of the uncacheable builtins called (empty: the policy is cacheable);
    raises PolicyLoadError listing every problem found.
    """
    facts = [module_facts(m) for m in modules]
    defined = {f"{f.package}.{name}" for f in facts for name in f.functions}
    problems: list[str] = []
    uncacheable: set[str] = set()
    for module in facts:
        for name, line in module.calls:
            where = f"{module.file.path}:{line}"
            resolved = _resolve(name, module)
            if resolved is not None:
                if resolved not in defined:
                    problems.append(f"{where}: calls {name}, which no module defines")
                continue
            if name in UNCACHEABLE:
                uncacheable.add(name)
            if name in UNSUPPORTED or name.startswith(UNSUPPORTED_FAMILIES):
                problems.append(
                    f"{where}: calls {name}, which the embedded engine evaluates as undefined "
                    "(use engine: opa for it)"
                )
            elif name in ENGINE_DEPENDENT:
                problems.append(
                    f"{where}: calls {name}, whose result differs between the embedded engine and OPA: "
                    f"{ENGINE_DEPENDENT[name]}"
                )
            elif not is_builtin(name):
                problems.append(f"{where}: calls {name}, which is neither defined here nor a builtin")
        for tok in _sprintf_q(module.file):
            problems.append(f"{module.file.path}:{tok}: sprintf with %q prints a literal %q here; use %v")
        package_rules = [r for f in facts if f.package == module.package for r in f.rules]
        problems.extend(_variable_problems(module, _scope(module, facts), rule_kinds(package_rules)))
        problems.extend(_reference_problems(module, defined, is_builtin))
    if problems:
        raise PolicyLoadError("; ".join(problems))
    return sorted(uncacheable)


def _scope(module: ModuleFacts, facts: list[ModuleFacts]) -> Scope:
    package_rules = [r for f in facts if f.package == module.package for r in f.rules]
    return Scope(
        frozenset(r.name for r in package_rules),
        frozenset(r.name for r in package_rules if r.has_default or r.always_defined),
        module.aliases,
    )


def _variable_problems(module: ModuleFacts, scope: Scope, kinds: Mapping[str, Kinds]) -> list[str]:
    problems = []
    for rule in module.rules:
        for name, line in unsafe_variables(rule, scope):
            problems.append(
                f"{module.file.path}:{line}: var {name} is unsafe: nothing binds it (a misspelling?); "
                "OPA refuses this, and the embedded engine would never make the expression true"
            )
        for what, line in type_errors(rule, lambda name: name in scope.rules, kinds):
            problems.append(
                f"{module.file.path}:{line}: type error: {what}; OPA refuses this, and the embedded "
                "engine would never make the expression true"
            )
        for ref, line in undefined_under_not(rule, scope):
            problems.append(
                f"{module.file.path}:{line}: `not` over a builtin whose argument {ref} may be undefined: "
                "OPA's answer is then undefined where the embedded engine's is true; give the value "
                'a default first (`default x := null`, or object.get(input, "field", null))'
            )
    return problems


def _reference_problems(
    module: ModuleFacts, defined: set[str], is_builtin: Callable[[str], bool]
) -> list[str]:
    """Import paths and `with` targets OPA refuses (regopy ignores a `with` on nothing)."""
    problems = []
    toks = tokens(module.file.text)
    for index, tok in enumerate(toks[:-1]):
        target = toks[index + 1]
        head = target.text.split(".", 1)[0]
        where = f"{module.file.path}:{tok.line}"
        if tok.text == "import" and tok.kind == "name" and head not in ("data", "input", "future", "rego"):
            problems.append(f"{where}: an import path begins with data, input, future or rego, not {head}")
        elif tok.text == "with" and tok.kind == "name" and head not in ("data", "input"):
            resolved = _resolve(target.text, module)
            if (resolved is None and not is_builtin(target.text)) or (
                resolved is not None and resolved not in defined
            ):
                problems.append(
                    f"{where}: `with {target.text}` replaces nothing: its target must be input, data "
                    "or a function"
                )
    return problems


def _resolve(name: str, module: ModuleFacts) -> str | None:
    """The qualified name of a call to a policy-defined function; None for a builtin."""
    if name.startswith("data."):
        return name[len("data.") :]
    head, _, rest = name.partition(".")
    if head in module.imports and rest:
        return f"{module.imports[head]}.{rest}"
    if name in module.functions:
        return f"{module.package}.{name}"
    return None


def _refuse_v0(file: RegoFile, toks: list[Token]) -> None:
    every_pending = False
    for index, tok in enumerate(toks):
        if (
            tok.text == "import"
            and index + 1 < len(toks)
            and toks[index + 1].text.startswith("future.keywords")
        ):
            raise PolicyLoadError(
                f"{file.path}:{tok.line}: `import future.keywords` is Rego v0; "
                "write Rego v1 (drop the import)"
            )
        if tok.depth != 0:
            continue
        if tok.text == "every":
            every_pending = True
        elif tok.text == "{" and tok.kind == "op":
            previous = toks[index - 1] if index else None
            if previous is None or previous.text in _VALUE_CONTEXT:
                continue  # a value: an object, a set, `every`'s domain
            if every_pending:
                every_pending = False
            else:
                raise PolicyLoadError(
                    f"{file.path}:{tok.line}: a rule body without `if` is Rego v0 syntax; "
                    "write Rego v1 (`rule if { ... }`, `set contains x if { ... }`)"
                )


def _sprintf_q(file: RegoFile) -> list[int]:
    toks = tokens(file.text)
    return [
        toks[i].line
        for i in range(len(toks) - 2)
        if toks[i].text == "sprintf" and toks[i + 1].text == "(" and toks[i + 2].text == '"%q"'
    ]
