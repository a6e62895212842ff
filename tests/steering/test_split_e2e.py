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
