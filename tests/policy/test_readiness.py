"""/readyz follows the policy engine: not ready (503, with the reason) while OPA cannot be
reached or every embedded evaluation thread is stuck, since every request would be refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from adapters.policy.rego import RegoEngine
from simulator import RunningSimulator
from tests.harness import chat_body, eventually
from tests.policy.conftest import policy_config
from tests.policy.gateway_setup import policy_gateway_config, write_policy_dir
from tests.policy.opa_server import OpaProtocolServer
from tests.policy.test_eval_pool import SLOW_POLICY
from tests.servers import TEST_KEY, running_gateway


def test_readyz_is_not_ready_while_opa_is_down(upstream_sim: RunningSimulator, tmp_path: Path) -> None:
    opa = OpaProtocolServer(str(write_policy_dir(tmp_path / "policies")))
    opa.start()
    try:
        policy = {"engine": "opa", "opa": {"url": opa.url, "timeout_ms": 2000}}
        with running_gateway(policy_gateway_config(upstream_sim, policy)) as gateway:
            ready = httpx.get(gateway.url + "/readyz", timeout=30)
            assert ready.status_code == 200
            assert ready.json()["status"] == "ready"
            assert ready.json()["policy"] == {
                "engine": "opa",
                "ready": True,
                "detail": "the policy engine (OPA) is healthy",
            }
            port = opa.port
            opa.stop()
            down = httpx.get(gateway.url + "/readyz", timeout=30)
            assert down.status_code == 503
            body = down.json()
            assert body["status"] == "not_ready"
            assert body["policy"]["ready"] is False
            assert "the policy engine (OPA) cannot be reached" in body["policy"]["detail"]
            assert set(body["upstreams"]) == {"local", "backup"}
            refused = httpx.post(
                gateway.url + "/v1/chat/completions",
                json=chat_body("chat"),
                headers={"authorization": f"Bearer {TEST_KEY}"},
                timeout=30,
            )
            assert refused.status_code == 503  # what readiness warned of
            opa.start(port)
            assert eventually(lambda: httpx.get(gateway.url + "/readyz", timeout=30).status_code == 200, 30)
    finally:
        opa.stop()


def test_readyz_names_the_embedded_revision(upstream_sim: RunningSimulator, tmp_path: Path) -> None:
    policy = {"dir": str(write_policy_dir(tmp_path / "policies"))}
    with running_gateway(policy_gateway_config(upstream_sim, policy)) as gateway:
        ready = httpx.get(gateway.url + "/readyz", timeout=30)
    assert ready.status_code == 200
    assert ready.json()["policy"]["engine"] == "rego"
    assert ready.json()["policy"]["ready"] is True
    assert "the embedded policy is loaded (revision " in ready.json()["policy"]["detail"]


async def test_the_embedded_engine_is_not_ready_while_every_thread_is_stuck(tmp_path: Path) -> None:
    (tmp_path / "authz.rego").write_text(SLOW_POLICY)
    engine = await RegoEngine.open(policy_config(dir=str(tmp_path), eval_threads=1, eval_abandoned_max=0))
    try:
        assert (await engine.readiness()).ready
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await engine.evaluate({"work": 4000})
        readiness = await engine.readiness()
        assert not readiness.ready
        assert "outlived the timeout" in readiness.detail
    finally:
        await engine.aclose()


def test_the_evaluation_queue_is_measured(upstream_sim: RunningSimulator, tmp_path: Path) -> None:
    policy = {"dir": str(write_policy_dir(tmp_path / "policies"))}
    with running_gateway(policy_gateway_config(upstream_sim, policy)) as gateway:
        headers = {"authorization": f"Bearer {TEST_KEY}"}
        response = httpx.post(
            gateway.url + "/v1/chat/completions", json=chat_body("chat"), headers=headers, timeout=30
        )
        assert response.status_code == 200
        page = httpx.get(gateway.url + "/metrics", timeout=30).text
    lines = page.splitlines()
    assert 'tollgate_policy_queue_wait_seconds_count{tollgate_engine="rego"} 1.0' in lines
    for state in ("waiting", "running", "abandoned"):
        assert f'tollgate_policy_queue{{tollgate_engine="rego",tollgate_state="{state}"}} 0.0' in lines
    assert 'tollgate_policy_queue_refused_total{tollgate_engine="rego"} 0.0' in lines
