"""A policy that fails while it evaluates (two definitions of a complete rule giving
different values) refuses the request with the same answer on both engines: 503
policy_unavailable, not a deny, and the embedded engine names the rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.policy.compiled import compile_revision
from adapters.policy.rego import RegoEngine
from adapters.policy.source import read_policy_dir
from gateway.errors import PolicyUnavailable
from simulator import RunningSimulator
from tests.harness import chat_body, openai_error
from tests.policy.conftest import ENTRYPOINT, policy_config
from tests.policy.gateway_setup import policy_gateway_config, write_policy_dir
from tests.policy.golden import input_doc
from tests.policy.opa_reference import OpaError, decide, opa_engine
from tests.policy.opa_server import opa_protocol_server
from tests.servers import TEST_KEY, running_gateway

# A second definition of `limits`, which differs from the first for one data class.
CONFLICT = """package gateway.authz

limits := {"max_tokens": 1} if data_class == "offsite"
"""


@pytest.fixture(scope="module")
def conflicting_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = write_policy_dir(tmp_path_factory.mktemp("conflict") / "policies")
    (target / "conflict.rego").write_text(CONFLICT)
    return target


async def test_the_embedded_engine_refuses_with_the_rule_named_as_opa_fails(conflicting_dir: Path) -> None:
    source = read_policy_dir(conflicting_dir)
    offsite = input_doc(data_class="offsite")
    with opa_engine(source.policy_modules, source.data) as reference:
        with pytest.raises(OpaError, match="eval_conflict_error"):
            decide(reference, ENTRYPOINT.replace("/", "."), offsite)
        assert decide(reference, ENTRYPOINT.replace("/", "."), input_doc())["allow"] is True
    engine = RegoEngine(compile_revision(source, ENTRYPOINT), policy_config(dir=str(conflicting_dir)))
    try:
        with pytest.raises(PolicyUnavailable, match=r"rule gateway\.authz\.limits has more than one value"):
            await engine.evaluate(offsite)
        assert (await engine.evaluate(input_doc())).value["allow"] is True
    finally:
        await engine.aclose()


@pytest.fixture(scope="module", params=["rego", "opa"])
def gateway_url(
    request: pytest.FixtureRequest, upstream_sim: RunningSimulator, conflicting_dir: Path
) -> Iterator[str]:
    with opa_protocol_server(str(conflicting_dir)) as opa:
        policy: dict[str, object] = {"dir": str(conflicting_dir)}
        if request.param == "opa":
            policy |= {"engine": "opa", "opa": {"url": opa.url, "timeout_ms": 2000}}
        with running_gateway(policy_gateway_config(upstream_sim, policy)) as gateway:
            yield gateway.url


def test_both_engines_answer_a_conflict_with_503(gateway_url: str, request: pytest.FixtureRequest) -> None:
    with httpx.Client(base_url=gateway_url, headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30) as c:
        response = c.post("/v1/chat/completions", json=chat_body("chat"), headers={"x-data-class": "offsite"})
        error = openai_error(response, 503)
        assert error["code"] == "policy_unavailable"
        assert "rule gateway.authz.limits has more than one value" in error["message"]  # either engine
        assert c.post("/v1/chat/completions", json=chat_body("chat")).status_code == 200
