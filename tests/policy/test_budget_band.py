"""The policy sees the caller's budget band: a used-up soft budget lowers max_tokens through
the shipped policy; a used-up hard budget is refused by the meter with insufficient_quota."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import HELLO, eventually, openai_error, recorded
from tests.policy.gateway_setup import policy_gateway_config, write_policy_dir
from tests.servers import RunningGateway, running_gateway

pytestmark = pytest.mark.usefixtures("one_budget_day")

SOFT_KEY = "tg-test-soft-budget"
HARD_KEY = "tg-test-hard-budget"
PRICE = {"input": 1000, "cached_input": 100, "output": 2000}  # micro-dollars per token: used up fast
TENANTS = {
    "soft": {"models": ["chat"], "limits": {"max_tokens": 2048}},
    "hard": {"models": ["chat"], "limits": {"max_tokens": 2048}},
}


@pytest.fixture(scope="module")
def banded(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    root = tmp_path_factory.mktemp("band")
    policies = write_policy_dir(root / "policies", TENANTS)
    config = policy_gateway_config(
        upstream_sim,
        {"engine": "rego", "dir": str(policies)},
        tenants={
            "soft": {"budgets": [{"window": "day", "usd": 0.01, "kind": "soft"}]},
            "hard": {"budgets": [{"window": "day", "usd": 0.01}]},
        },
        keys=[{"tenant": "soft", "hash": hash_key(SOFT_KEY)}, {"tenant": "hard", "hash": hash_key(HARD_KEY)}],
        prices={"sim-model": PRICE},
        state={"store": "sqlite", "sqlite_path": str(root / "state.db")},
        metering={"band_cache_s": 0},
    )
    with running_gateway(config) as running:
        yield running


def _chat(gateway: RunningGateway, key: str, request_id: str) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/chat/completions",
        json={"model": "chat", "messages": HELLO, "max_tokens": 2000, "x_sim": {"reply": "word " * 20}},
        headers={"authorization": f"Bearer {key}", "x-request-id": request_id},
        timeout=30,
    )


def test_a_used_up_soft_budget_changes_what_the_policy_decides(
    banded: RunningGateway, upstream_sim: RunningSimulator
) -> None:
    first = _chat(banded, SOFT_KEY, "band-soft-0")
    assert first.status_code == 200
    [sent] = recorded(upstream_sim, "band-soft-0")
    assert sent.body["max_tokens"] == 2000  # band ok: the client's own figure

    def soft_exceeded() -> bool:  # a soft budget is not enforced: requests go on, and spend grows
        n = len(upstream_sim.requests)
        assert _chat(banded, SOFT_KEY, f"band-soft-{n}").status_code == 200
        [later] = recorded(upstream_sim, f"band-soft-{n}")
        return bool(later.body["max_tokens"] == 1024)  # the shipped policy's soft_budget_max_tokens

    assert eventually(soft_exceeded, 20)


def test_a_used_up_hard_budget_is_refused_by_the_meter(banded: RunningGateway) -> None:
    for n in range(50):
        response = _chat(banded, HARD_KEY, f"band-hard-{n}")
        if response.status_code != 200:
            break
    error = openai_error(response, 429)
    assert error["code"] == "insufficient_quota"  # not the policy's 403, though the band says exceeded
