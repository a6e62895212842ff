"""Mirrors through the gateway: a share of an alias's requests is also sent to a shadow,
whose answer never reaches the client, whose slowness or failure never changes the primary's
response, whose copy is redacted like the primary's, and whose calls are recorded per arm.

Behaviour only (which requests, which bodies, which responses, what is counted); the
latency comparison is in the benchmark (bench/routing.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapters.state.sqlite import SQLiteStore
from gateway.cli import main
from gateway.config import GatewayConfig
from gateway.keys import hash_key
from gateway.routing.rendezvous import stable_hash
from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import eventually, openai_upstream
from tests.policy.conftest import SHIPPED_POLICIES
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, gateway_config, running_gateway

PRIMARY, SHADOW = "k26-current", "k26-candidate"
REQUESTS = 60


@pytest.fixture(scope="module")
def mirror_sim() -> Iterator[RunningSimulator]:
    """Replica 0 is the primary, replica 1 the shadow."""
    sim = Simulator.start_in_thread(SimConfig(replicas=2, api_key=UPSTREAM_KEY))
    yield sim
    sim.stop()


def mirror_config(sim: RunningSimulator, audit: Path, max_in_flight: int) -> Any:
    return gateway_config(
        upstreams={
            "current": openai_upstream(sim.openai_base_url(0)),
            "candidate": openai_upstream(sim.openai_base_url(1), retries=0),
        },
        models={
            "kimi": [
                {"upstream": "current", "model": PRIMARY},
                {"upstream": "candidate", "model": SHADOW, "mirror": 20},
            ],
        },
        routing={"mirror": {"max_in_flight": max_in_flight, "timeout_s": 2}},
        redaction={"request": "mask", "entities": ["EMAIL"]},
        audit={"sink": "jsonl", "path": str(audit), "flush_interval_ms": 0},
    )


@pytest.fixture(scope="module")
def mirrored(mirror_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    audit = tmp_path_factory.mktemp("mirror") / "audit.jsonl"
    with running_gateway(mirror_config(mirror_sim, audit, max_in_flight=256)) as gateway:
        yield gateway, audit


@pytest.fixture
def sim(mirror_sim: RunningSimulator) -> Iterator[RunningSimulator]:
    mirror_sim.faults.clear()
    mirror_sim.clear()
    yield mirror_sim
    mirror_sim.faults.clear()


def mirrored_ids(prefix: str, n: int = REQUESTS) -> tuple[list[str], set[str]]:
    """Request ids, and which of them a 20 % mirror copies (by the id's hash, as the gateway does)."""
    ids = [f"{prefix}-{i}" for i in range(n)]
    return ids, {i for i in ids if stable_hash(i) % 10_000 < 2_000}


def send_all(gateway: RunningGateway, ids: list[str], stream: bool = False) -> list[httpx.Response]:
    replies = []
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        for request_id in ids:
            replies.append(
                client.post(
                    "/chat/completions",
                    json={
                        "model": "kimi",
                        "messages": [{"role": "user", "content": f"say hi ({request_id})"}],
                        "max_tokens": 8,
                        "stream": stream,
                    },
                    headers={"authorization": f"Bearer {TEST_KEY}", "x-request-id": request_id},
                )
            )
    return replies


def shadow_calls(sim: RunningSimulator) -> list[Any]:
    return [r for r in list(sim.requests) if r.replica == 1 and r.path.endswith("/chat/completions")]


def answer_texts(replies: list[httpx.Response]) -> list[tuple[int, str, str]]:
    out = []
    for reply in replies:
        body = reply.json()
        out.append((reply.status_code, body["model"], body["choices"][0]["message"]["content"]))
    return out


def test_a_20_percent_mirror_copies_those_requests_and_never_answers_with_the_shadow(
    mirrored: Any, sim: RunningSimulator
) -> None:
    gateway, _ = mirrored
    ids, copied = mirrored_ids("m-ok")
    assert 4 <= len(copied) <= 20  # the fixed ids give a share near 20 %
    replies = send_all(gateway, ids)
    assert all(status == 200 and model == PRIMARY for status, model, _ in answer_texts(replies))
    assert eventually(lambda: len(shadow_calls(sim)) == len(copied))
    assert {r.body["model"] for r in shadow_calls(sim)} == {SHADOW}
    primaries = [r for r in list(sim.requests) if r.replica == 0]
    assert len(primaries) == REQUESTS


@pytest.mark.parametrize(
    "fault",
    [{"status": 500, "message": "shadow broke"}, {"kind": "hang"}, {"kind": "disconnect", "after_chunks": 1}],
    ids=["failing", "hanging", "cut"],
)
def test_a_failing_or_hanging_shadow_never_changes_a_primary_response(
    mirrored: Any, sim: RunningSimulator, fault: dict[str, Any]
) -> None:
    gateway, _ = mirrored
    ids, copied = mirrored_ids("m-base")
    baseline = answer_texts(send_all(gateway, ids))
    assert eventually(lambda: len(shadow_calls(sim)) == len(copied))
    sim.faults.set(fault, replica=1)
    faulty = answer_texts(send_all(gateway, ids))
    assert faulty == baseline  # same statuses, same served model, same answers


def test_shadow_failures_and_skips_are_counted_never_surfaced(sim: RunningSimulator, tmp_path: Path) -> None:
    sim.faults.set({"kind": "hang"}, replica=1)
    with running_gateway(mirror_config(sim, tmp_path / "audit.jsonl", max_in_flight=4)) as gateway:
        ids, _ = mirrored_ids("m-hang", 120)
        replies = send_all(gateway, ids)
        assert all(r.status_code == 200 for r in replies)
        # At most 4 shadow calls hang at a time: the rest are skipped, and the hung ones time out
        # (the mirror's timeout or the upstream's own, whichever ends them first).
        assert eventually(lambda: outcomes(gateway).get("mirror_busy", 0) > 0, seconds=10)
        assert eventually(lambda: failed(outcomes(gateway)) > 0, seconds=10)
        assert "success" not in outcomes(gateway)


def failed(found: dict[str, float]) -> float:
    return sum(count for outcome, count in found.items() if outcome not in ("success", "mirror_busy"))


def outcomes(gateway: RunningGateway) -> dict[str, float]:
    """Shadow calls by outcome, from /metrics."""
    found: dict[str, float] = {}
    for line in httpx.get(gateway.url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("tollgate_arm_requests_total{") and 'tollgate_role="shadow"' in line:
            outcome = line.split('tollgate_outcome="')[1].split('"')[0]
            found[outcome] = found.get(outcome, 0) + float(line.rsplit(" ", 1)[1])
    return found


def test_the_shadow_gets_the_redacted_body(mirrored: Any, sim: RunningSimulator) -> None:
    gateway, _ = mirrored
    _, copied = mirrored_ids("m-red", 20)
    request_id = sorted(copied)[0]
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        reply = client.post(
            "/chat/completions",
            json={"model": "kimi", "messages": [{"role": "user", "content": "mail jane.doe@example.com"}]},
            headers={"authorization": f"Bearer {TEST_KEY}", "x-request-id": request_id},
        )
    assert reply.status_code == 200
    assert eventually(lambda: len(shadow_calls(sim)) == 1)
    [copy] = shadow_calls(sim)
    text = json.dumps(copy.body)
    assert "jane.doe@example.com" not in text
    assert "[EMAIL]" in text


def test_each_arm_is_recorded_in_the_decision_log(mirrored: Any, sim: RunningSimulator) -> None:
    gateway, audit = mirrored
    ids, copied = mirrored_ids("m-log", 30)
    send_all(gateway, ids, stream=True)

    def arms() -> list[dict[str, Any]]:
        records = [json.loads(line) for line in Path(audit).read_text().splitlines()]
        return [r for r in records if r.get("type") == "arm" and r["request_id"] in ids]

    assert eventually(lambda: len(arms()) == len(ids) + len(copied))
    primary = [r for r in arms() if r["role"] == "primary"]
    shadow = [r for r in arms() if r["role"] == "shadow"]
    assert {r["arm"] for r in primary} == {f"current/{PRIMARY}"}
    assert {r["arm"] for r in shadow} == {f"candidate/{SHADOW}"}
    assert {r["request_id"] for r in shadow} == copied
    for record in shadow + primary:
        assert record["error"] is None
        assert record["ttft_ms"] is not None and record["completion_tokens"] > 0
        assert record["finish_reason"] in ("stop", "length")


def test_compare_reports_the_arms_against_each_other(
    mirrored: Any, sim: RunningSimulator, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway, audit = mirrored
    ids, copied = mirrored_ids("m-cmp", 40)
    send_all(gateway, ids, stream=True)
    records = lambda: [json.loads(line) for line in Path(audit).read_text().splitlines()]  # noqa: E731
    assert eventually(lambda: sum(1 for r in records() if r.get("request_id") in copied) >= len(copied) * 2)
    assert main(["compare", "--alias", "kimi", "--since", "1h", "--path", str(audit), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    arms = {(a["role"], a["arm"]): a for a in report["arms"]}
    primary, shadow = arms[("primary", f"current/{PRIMARY}")], arms[("shadow", f"candidate/{SHADOW}")]
    assert primary["requests"] >= len(ids) and shadow["requests"] >= len(copied)
    for arm in (primary, shadow):
        assert arm["ttft_p50_ms"] is not None and arm["ttft_p95_ms"] >= arm["ttft_p50_ms"]
        assert arm["output_tokens_per_request"] > 0
    assert main(["compare", "--alias", "kimi", "--since", "1h", "--path", str(audit)]) == 0
    table = capsys.readouterr().out
    assert f"candidate/{SHADOW}" in table and "ttft_p95_ms" in table
    assert main(["compare", "--alias", "kimi", "--since", "yesterday-ish", "--path", str(audit)]) == 2


@pytest.mark.usefixtures("one_budget_day")
def test_a_metered_mirror_puts_its_shadow_cost_in_the_ledger_never_on_a_budget(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    config = mirror_config(sim, tmp_path / "audit.jsonl", max_in_flight=64).model_dump(by_alias=True)
    config["routing"]["mirror"]["meter"] = True
    config["state"] = {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    config["prices"] = {PRIMARY: {"input": 1, "output": 2}, SHADOW: {"input": 3, "output": 5}}
    config["tenants"]["alpha"]["budgets"] = [{"window": "day", "tokens": 10_000_000}]
    config["admin"] = {"tokens": [hash_key("tg-test-mirror-admin")]}
    with running_gateway(GatewayConfig.model_validate(config)) as gateway:
        ids, copied = mirrored_ids("m-meter", 30)
        assert all(r.status_code == 200 for r in send_all(gateway, ids))

        def by_workflow() -> dict[str, dict[str, Any]]:
            response = httpx.get(
                gateway.url + "/admin/spend",
                params={"group_by": "workflow"},
                headers={"authorization": "Bearer tg-test-mirror-admin"},
                timeout=30,
            )
            return {entry["workflow"]: entry for entry in response.json()["data"]}

        assert eventually(
            lambda: (
                by_workflow().get("shadow", {}).get("requests") == len(copied)
                and by_workflow().get("default", {}).get("requests") == len(ids)
            )
        )
        spend = by_workflow()
        assert spend["shadow"]["cost_micros"] > 0

    # The budget counts only the primaries' tokens: the store's counter matches the
    # primaries' ledger rows exactly.
    async def used() -> tuple[int, ...]:
        store = SQLiteStore(tmp_path / "state.db")
        try:
            return await store.counters("alpha", (f"t:day:{datetime.now(UTC).date().isoformat()}:tok",))
        finally:
            await store.aclose()

    default = spend["default"]
    assert asyncio.run(used()) == (default["prompt_tokens"] + default["completion_tokens"],)


def test_a_shadow_on_an_upstream_the_policy_does_not_permit_is_never_sent(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(SHIPPED_POLICIES, policies)
    data = yaml.safe_load((policies / "data.yaml").read_text())
    data["tenants"]["alpha"] = {"models": ["*"]}
    data["data_classes"]["onsite"] = {"upstreams": ["current"]}  # the shadow's upstream is not listed
    (policies / "data.yaml").write_text(yaml.safe_dump(data))
    config = mirror_config(sim, tmp_path / "audit.jsonl", max_in_flight=64).model_dump(by_alias=True)
    config["policy"] = {"dir": str(policies)}
    with running_gateway(GatewayConfig.model_validate(config)) as gateway:
        ids, copied = mirrored_ids("m-onsite", 30)
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            for request_id in ids:
                reply = client.post(
                    "/chat/completions",
                    json={"model": "kimi", "messages": [{"role": "user", "content": "internal figures"}]},
                    headers={
                        "authorization": f"Bearer {TEST_KEY}",
                        "x-request-id": request_id,
                        "x-data-class": "onsite",
                    },
                )
                assert reply.status_code == 200
        assert eventually(lambda: outcomes(gateway).get("not_permitted", 0) == len(copied))
        assert shadow_calls(sim) == []
