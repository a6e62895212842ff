"""The engine contract: the same policy files give the same decisions from the embedded
engine (regopy) and from an OPA server (here the OPA-protocol test server)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.policy.opa import OpaEngine
from adapters.policy.rego import RegoEngine
from gateway.policy.decision import parse_decision
from gateway.ports import PolicyEngine
from tests.policy.golden import GOLDEN

CASES = [pytest.param(doc, expected, id=name) for name, doc, expected in GOLDEN]


async def _decide(engine: PolicyEngine, doc: dict[str, Any]) -> Any:
    result = await engine.evaluate(doc)
    assert result.error is None
    return result.value


@pytest.mark.parametrize(("doc", "expected"), CASES)
async def test_the_embedded_engine_gives_the_golden_decision(
    rego_engine: RegoEngine, doc: dict[str, Any], expected: dict[str, Any]
) -> None:
    value = await _decide(rego_engine, doc)
    assert value == expected
    assert parse_decision(value).allow is expected["allow"]


@pytest.mark.parametrize(("doc", "expected"), CASES)
async def test_an_opa_server_gives_the_golden_decision(
    opa_engine: OpaEngine, doc: dict[str, Any], expected: dict[str, Any]
) -> None:
    value = await _decide(opa_engine, doc)
    assert value == expected


async def test_the_embedded_engine_names_its_revision_and_is_cacheable(rego_engine: RegoEngine) -> None:
    result = await rego_engine.evaluate(GOLDEN[0][1])
    assert result.revision == rego_engine.revision
    assert len(result.revision) == 12
    assert rego_engine.cacheable


async def test_an_opa_server_passes_its_decision_id_and_bundle_revision(opa_engine: OpaEngine) -> None:
    first = await opa_engine.evaluate(GOLDEN[0][1])
    second = await opa_engine.evaluate(GOLDEN[0][1])
    assert first.decision_id and second.decision_id and first.decision_id != second.decision_id
    assert first.revision.startswith("policies@")
    assert opa_engine.revision == first.revision
    assert not opa_engine.cacheable  # no TTL configured: the gateway cannot see the server's reloads
