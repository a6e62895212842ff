"""A split through the gateway: sessions spread over the arms by weight, each session's turns
on one arm, the policy's upstreams respected; the simulator's two replicas are the arms."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from simulator import RunningSimulator
from tests.harness import openai_upstream, recorded
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway

SESSIONS = 200


@pytest.fixture(scope="module")
def split_gateway(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    config = gateway_config(
        upstreams={
            "current": openai_upstream(upstream_sim.openai_base_url(0)),
            "candidate": openai_upstream(upstream_sim.openai_base_url(1)),
        },
        models={
            "kimi": [
                {"upstream": "current", "model": "k26-current", "weight": 90},
                {"upstream": "candidate", "model": "k26-candidate", "weight": 10},
            ],
        },
    )
    with running_gateway(config) as gateway:
        yield gateway


def test_sessions_split_by_weight_and_each_stays_on_its_arm(
    split_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    arms: dict[int, set[str]] = {}
    with httpx.Client(base_url=split_gateway.base_url, timeout=30) as client:
        for turn in range(2):
            for session in range(SESSIONS):
                request_id = f"split-{session}-{turn}"
                messages = [{"role": "user", "content": f"hello {session}"}]
                if turn:
                    messages += [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]
                response = client.post(
                    "/chat/completions",
                    json={"model": "kimi", "messages": messages, "max_tokens": 4},
                    headers={
                        "authorization": f"Bearer {TEST_KEY}",
                        "x-session-id": f"conversation-{session}",
                        "x-request-id": request_id,
                    },
                )
                assert response.status_code == 200
                [sent] = recorded(upstream, request_id)
                arms.setdefault(session, set()).add(sent.body["model"])
    assert all(len(models) == 1 for models in arms.values())  # every session on one arm
    shares = Counter(next(iter(models)) for models in arms.values())
    # Deterministic (the session ids are fixed); 200 sessions carry sampling noise of ~2 %.
    assert abs(shares["k26-candidate"] / SESSIONS - 0.10) <= 0.05
    assert shares["k26-current"] + shares["k26-candidate"] == SESSIONS


BOTH = [{"upstream": "dear", "model": "sim-dear"}, {"upstream": "cheap", "model": "sim-cheap"}]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def spill_gateway(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    config = gateway_config(
        upstreams={
            "dear": openai_upstream(upstream_sim.openai_base_url(0)),
            "cheap": openai_upstream(upstream_sim.openai_base_url(1)),
        },
        models={
            "spill": [{"upstream": "dear", "model": "sim-dear"}, {"upstream": "cheap", "model": "sim-cheap"}],
            "fastest": [
                {"upstream": "dear", "model": "sim-dear"},
                {"upstream": "cheap", "model": "sim-cheap"},
            ],
        },
        prices={"sim-dear": {"input": 10, "output": 40}, "sim-cheap": {"input": 0.1, "output": 0.2}},
        routing={"choose": {"spill": "least_cost", "fastest": "least_latency"}},
    )
    with running_gateway(config) as gateway:
        yield gateway


def test_least_cost_serves_from_the_cheapest_candidate_of_the_alias(
    spill_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    with httpx.Client(base_url=spill_gateway.base_url, timeout=30) as client:
        for i in range(3):
            response = client.post(
                "/chat/completions",
                json={"model": "spill", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                headers={"authorization": f"Bearer {TEST_KEY}", "x-request-id": f"spill-{i}"},
            )
            assert response.status_code == 200
            [sent] = recorded(upstream, f"spill-{i}")
            assert sent.body["model"] == "sim-cheap"


def test_least_latency_keeps_each_session_on_its_home(
    spill_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    homes: dict[str, set[str]] = {}
    with httpx.Client(base_url=spill_gateway.base_url, timeout=30) as client:
        for turn in range(3):
            for session in range(6):
                request_id = f"fast-{session}-{turn}"
                response = client.post(
                    "/chat/completions",
                    json={
                        "model": "fastest",
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 4,
                    },
                    headers={
                        "authorization": f"Bearer {TEST_KEY}",
                        "x-session-id": f"fast-session-{session}",
                        "x-request-id": request_id,
                    },
                )
                assert response.status_code == 200
                [sent] = recorded(upstream, request_id)
                homes.setdefault(f"s{session}", set()).add(sent.body["model"])
    assert all(len(models) == 1 for models in homes.values())
