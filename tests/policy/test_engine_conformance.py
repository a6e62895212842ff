"""The same policy files give the same results on the embedded engine (regopy) and on OPA's
own engine (tests/policy/opa_reference.py): the policy's Rego tests, and the decision for
a generated set of input documents, including documents with fields absent or of the
wrong type (where the engines' handling of undefined values has differed)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from adapters.policy.compiled import Evaluator, compile_revision
from adapters.policy.rego_tests import run_rego_tests
from adapters.policy.source import PolicySource, read_policy_dir
from tests.policy.conftest import ENTRYPOINT, SHIPPED_POLICIES
from tests.policy.golden import GOLDEN, input_doc
from tests.policy.opa_reference import OpaEngine, OpaError, decide, opa_engine, run_opa_tests

DECISION = ENTRYPOINT.replace("/", ".")
_ABSENT = object()

# Values each field takes in the generated documents: what the gateway sends, plus absent,
# null and wrong types.
FIELD_VALUES: dict[str, list[Any]] = {
    "tenant": ["demo", "mallory", "", None, 7, _ABSENT],
    "model": ["kimi-k2.6", "embeddings", "gpt-9", "*", None, 3, _ABSENT],
    "upstreams": [["local"], ["workers-ai", "local", "gpu-pool"], ["workers-ai"], [], None, _ABSENT],
    "tools": [[], ["search"], ["fetch_url", "search"], ["shell"], ["search", "shell"], None, _ABSENT],
    "tool_choice": [None, "auto", "named", _ABSENT],
    "tool_choice_name": [None, "search", "shell", 5, _ABSENT],
    "budget": ["ok", "soft_exceeded", "exceeded", None, _ABSENT],
    "data_class": [None, "public", "internal", "confidential", "secret", 1, _ABSENT],
}


def generated_inputs(count: int, seed: int = 20261125) -> Iterator[dict[str, Any]]:
    """Every field absent and null in turn, then `count` documents drawn at random."""
    for field in FIELD_VALUES:
        for value in (_ABSENT, None):
            yield _document({field: value})
    pick = random.Random(seed)
    for _ in range(count):
        yield _document({field: pick.choice(values) for field, values in FIELD_VALUES.items()})


def _document(values: dict[str, Any]) -> dict[str, Any]:
    doc = input_doc()
    for field, value in values.items():
        if value is _ABSENT:
            doc.pop(field, None)
        else:
            doc[field] = value
    return doc


@pytest.fixture(scope="module")
def shipped() -> PolicySource:
    return read_policy_dir(SHIPPED_POLICIES)


@pytest.fixture(scope="module")
def embedded(shipped: PolicySource) -> Evaluator:
    return compile_revision(shipped, ENTRYPOINT).evaluator()


@pytest.fixture(scope="module")
def reference(shipped: PolicySource) -> Iterator[OpaEngine]:
    with opa_engine(shipped.policy_modules, shipped.data) as engine:
        yield engine


def test_the_policy_tests_pass_on_both_engines(shipped: PolicySource) -> None:
    embedded_report = run_rego_tests(shipped)
    on_opa = run_opa_tests(shipped)
    assert embedded_report.passed, embedded_report.errors
    assert {o.name: o.passed for o in embedded_report.outcomes} == on_opa
    failed_on_opa = [name for name, passed in on_opa.items() if not passed]
    assert failed_on_opa == []
    assert len(on_opa) >= 24


@pytest.mark.parametrize(("doc", "expected"), [pytest.param(d, e, id=n) for n, d, e in GOLDEN])
def test_opa_gives_the_golden_decision(reference: OpaEngine, doc: dict[str, Any], expected: Any) -> None:
    assert decide(reference, DECISION, doc) == expected


def test_generated_inputs_get_the_same_decision_from_both_engines(
    embedded: Evaluator, reference: OpaEngine
) -> None:
    differences = []
    documents = list(generated_inputs(400))
    for doc in documents:
        ours = _outcome_embedded(embedded, doc)
        theirs = _outcome_opa(reference, doc)
        if ours != theirs:
            differences.append((doc, ours, theirs))
    assert differences == [], f"{len(differences)} of {len(documents)} differ; first: {differences[0]}"
    # The documents reach both outcomes and every reason the policy gives.
    decisions = [embedded.evaluate(orjson.dumps(d).decode()).value for d in documents]
    assert {d["allow"] for d in decisions} == {True, False}
    reasons = {r.split(" ", 2)[0] for d in decisions for r in d["reasons"]}
    # (tools are not denied by the policy: it lists what is allowed and the gateway refuses the rest)
    assert reasons >= {"tenant", "model", "unknown", "no"}


def _outcome_embedded(embedded: Evaluator, doc: dict[str, Any]) -> Any:
    result = embedded.evaluate(orjson.dumps(doc).decode())
    return result.value if result.error is None else "evaluation error"


def _outcome_opa(reference: OpaEngine, doc: dict[str, Any]) -> Any:
    try:
        return decide(reference, DECISION, doc)
    except OpaError:
        return "evaluation error"


def test_the_generated_documents_cover_each_field_absent_and_null() -> None:
    documents = list(generated_inputs(0))
    for field in FIELD_VALUES:
        assert any(field not in d for d in documents)
        assert any(field in d and d[field] is None for d in documents)
    pairs = itertools.combinations(FIELD_VALUES, 2)
    many = list(generated_inputs(400))
    assert all(any(a not in d and b in d for d in many) for a, b in pairs)
