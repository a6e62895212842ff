"""Variables and undefined values: what OPA's compiler refuses and regopy does not.

- A variable that nothing binds (a misspelled name, say) is "unsafe" to OPA, which refuses
  the module; regopy loads it and the expression is simply never true, so a `deny` rule
  using it silently never fires. A name is bound by `:=` or `=`, `some`, `every`, a
  function's parameters, or as the index of a reference (`data.tenants[t]`) outside a
  negation; otherwise it must name a rule of the package, an import, `input` or `data`.
- `not` over a builtin (a call or an operator other than `==`) whose argument may be
  undefined (`not startswith(input.x, "a")` with no `input.x`) is undefined in OPA and
  true in regopy. Refused unless every reference under it is always defined: a local
  variable, `input`/`data` themselves, or a rule with a `default` (or a partial set or
  a comprehension, which are empty rather than undefined).

Approximations, on purpose: a variable bound anywhere in a rule counts as bound in the
whole rule (OPA also refuses one bound only inside a comprehension or after its use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adapters.policy.rego_rules import BUILTIN_KEYWORDS, KEYWORDS, Rule, expression_end, matching, opening
from adapters.policy.rego_tokens import Token
from adapters.policy.rego_types import builtin_types, call_arguments

# Infix operators that are builtin calls (`==` and `=` are unification, which is not).
_BUILTIN_OPERATORS = frozenset({"!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "&", "|", "in"})
_ROOTS = frozenset({"input", "data"})


@dataclass(frozen=True, slots=True)
class Scope:
    """What a rule may refer to besides its own variables."""

    rules: frozenset[str]  # rules and functions of the rule's package
    always_defined: frozenset[str]  # those of them that are never undefined
    imports: frozenset[str]  # import aliases


def unsafe_variables(rule: Rule, scope: Scope) -> list[tuple[str, int]]:
    """(name, line) of each variable of the rule that nothing binds, first use only."""
    toks = rule.tokens
    bound = bound_variables(rule)
    found: dict[str, int] = {}
    for i, tok in enumerate(toks):
        if not _is_reference(toks, i) or _is_rule_name(toks, i):
            continue
        head = tok.text.split(".", 1)[0]
        if head in bound or head in scope.rules or head in scope.imports or head in _ROOTS or head == "_":
            continue
        found.setdefault(head, tok.line)
    return list(found.items())


def undefined_under_not(rule: Rule, scope: Scope) -> list[tuple[str, int]]:
    """(reference, line) for each `not` over a builtin with a reference that may be undefined."""
    toks = rule.tokens
    bound = bound_variables(rule)
    found: list[tuple[str, int]] = []
    for i, tok in enumerate(toks):
        if tok.text != "not" or tok.kind != "name":
            continue
        end = expression_end(toks, i)
        under = range(i + 1, end)
        if not any(_is_builtin_use(toks, j) for j in under):
            continue
        for j in under:
            if _is_reference(toks, j) and _may_be_undefined(toks, j, bound, scope):
                found.append((toks[j].text, toks[j].line))
                break
    return found


def bound_variables(rule: Rule) -> set[str]:
    toks = rule.tokens
    negated = _negated(toks)
    bound = set(rule.params)
    for i, tok in enumerate(toks):
        if tok.kind == "op" and tok.text in (":=", "="):
            bound |= _pattern_before(toks, i)
            if tok.text == "=":
                bound |= _pattern_after(toks, i)
        elif tok.kind == "name" and tok.text in ("some", "every"):
            j = i + 1
            while j < len(toks) and toks[j].text != "in" and not toks[j].line_start:
                if toks[j].text in (";", "|", "{", "}", "]", ")"):
                    break
                if _is_variable(toks[j]):
                    bound.add(toks[j].text)
                j += 1
        elif tok.text == "[" and tok.kind == "op" and not negated[i] and _is_reference_index(toks, i):
            bound.add(toks[i + 1].text)
        elif tok.kind == "name" and i + 1 < len(toks) and toks[i + 1].text == "(":
            output = _output_argument(toks, i)
            if output is not None:
                bound.add(output)
    return bound


def _output_argument(toks: Sequence[Token], index: int) -> str | None:
    """`split(s, ".", parts)`: a builtin given one argument more than it takes binds the last."""
    signature = builtin_types().functions.get(toks[index].text)
    if signature is None:
        return None
    args = call_arguments(toks, index + 1)
    if len(args) != len(signature.args) + 1:
        return None
    start, end = args[-1]
    return toks[start].text if end == start + 1 and _is_variable(toks[start]) else None


def _is_reference_index(toks: Sequence[Token], index: int) -> bool:
    """`x[i]` (or `x[0][i]`), not a rule's own key (`p[k] := v`): the index binds i."""
    if index == 0 or _is_rule_name(toks, index - 1) or matching(toks, index) != index + 2:
        return False
    previous = toks[index - 1]
    is_ref = (previous.kind == "name" and previous.text not in KEYWORDS) or previous.text == "]"
    return is_ref and _is_variable(toks[index + 1])


def _pattern_before(toks: Sequence[Token], index: int) -> set[str]:
    if index == 0:
        return set()
    previous = toks[index - 1]
    if _is_variable(previous) and not (index >= 2 and toks[index - 2].text == "."):
        return {previous.text}
    if previous.text == "]":
        start = opening(toks, index - 1)
        return {t.text for t in toks[start : index - 1] if _is_variable(t)}
    return set()


def _pattern_after(toks: Sequence[Token], index: int) -> set[str]:
    if index + 1 >= len(toks):
        return set()
    following = toks[index + 1]
    after = toks[index + 2].text if index + 2 < len(toks) else ""
    if _is_variable(following) and after not in ("(", "[", "."):
        return {following.text}
    if following.text == "[":
        end = matching(toks, index + 1)
        return {t.text for t in toks[index + 2 : end] if _is_variable(t)}
    return set()


def _negated(toks: Sequence[Token]) -> list[bool]:
    mask = [False] * len(toks)
    for i, tok in enumerate(toks):
        if tok.text == "not" and tok.kind == "name":
            for j in range(i + 1, expression_end(toks, i)):
                mask[j] = True
    return mask


def _is_builtin_use(toks: Sequence[Token], index: int) -> bool:
    tok = toks[index]
    if tok.kind == "op":
        return tok.text in _BUILTIN_OPERATORS
    if tok.kind == "name" and tok.text == "in":
        return True
    following = toks[index + 1] if index + 1 < len(toks) else None
    called = tok.text not in KEYWORDS or tok.text in BUILTIN_KEYWORDS
    return tok.kind == "name" and called and following is not None and following.text == "("


def _may_be_undefined(toks: Sequence[Token], index: int, bound: set[str], scope: Scope) -> bool:
    tok = toks[index]
    head = tok.text.split(".", 1)[0]
    if head in bound or head == "_":
        return False
    if head in _ROOTS:
        following = toks[index + 1].text if index + 1 < len(toks) else ""
        return "." in tok.text or following in ("[", ".")
    if head in scope.imports:
        return True
    return head in scope.rules and head not in scope.always_defined


def _is_reference(toks: Sequence[Token], index: int) -> bool:
    """A name used as a value: not a keyword, a field after `.`, a call, or a `with` target."""
    tok = toks[index]
    if tok.kind != "name" or tok.text in KEYWORDS:
        return False
    previous = toks[index - 1].text if index else ""
    following = toks[index + 1].text if index + 1 < len(toks) else ""
    return previous not in (".", "with") and following != "("


def _is_rule_name(toks: Sequence[Token], index: int) -> bool:
    return index == 0 or (index == 1 and toks[0].text == "default")


def _is_variable(tok: Token) -> bool:
    return tok.kind == "name" and "." not in tok.text and tok.text not in KEYWORDS and tok.text != "_"
