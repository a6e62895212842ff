"""Session affinity over a pool of four replicas, through the gateway with the real openai client:
every turn of a session lands on the replica holding its prefix cache; a lost replica moves only
its own sessions, and they come back when it recovers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from simulator import RunningSimulator
from tests.harness import eventually, openai_upstream, recorded
from tests.routing.conftest import REPLICAS
from tests.routing.conversations import Conversation, ideal_cached_tokens
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, gateway_config, running_gateway

SESSIONS = 25  # not a multiple of the replicas, so round robin does not line sessions up by chance
TURNS = 6


def _pool(sim: RunningSimulator, **extra: Any) -> dict[str, Any]:
    replicas = [sim.openai_base_url(i) for i in range(REPLICAS)]
    upstream = openai_upstream(replicas[0], **extra)
    del upstream["base_url"]
    return {**upstream, "replicas": replicas}


@pytest.fixture(scope="module")
def pools(pool_sim: RunningSimulator) -> Iterator[RunningGateway]:
    fast_recovery = {"probe_interval_s": 0.05, "cooldown_s": 0.2, "failure_threshold": 1}
    config = gateway_config(
        upstreams={
            "affinity": _pool(pool_sim, health=fast_recovery),
            "round-robin": _pool(pool_sim, balance="round_robin"),
            "workers-ai": {
                "kind": "workers_ai",
                "account_id": "acct-1",
                "api_token": UPSTREAM_KEY,
                "base_url": pool_sim.workers_ai_base_url,
            },
        },
        models={
            "chat": [{"upstream": "affinity", "model": "sim-model"}],
            "chat-rr": [{"upstream": "round-robin", "model": "sim-model"}],
            "kimi": [{"upstream": "workers-ai", "model": "@cf/moonshotai/kimi-k2.6"}],
        },
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def client(pools: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=pools.base_url, api_key=TEST_KEY, max_retries=0) as oai:
        yield oai


class Replay:
    """Sends turns of conversations and records where each landed and what it hit."""

    def __init__(self, client: openai.OpenAI, sim: RunningSimulator, model: str, header: bool) -> None:
        self.client, self.sim, self.model, self.header = client, sim, model, header
        self.prompts: dict[str, list[list[dict[str, Any]]]] = {}
        self.cached = self.prompt = 0

    def turn(self, conversation: Conversation, number: int) -> int:
        """Send one turn; the replica that answered it."""
        messages = conversation.ask(number)
        request_id = f"{conversation.name}-{number}"
        headers = {"x-request-id": request_id}
        if self.header:
            headers["x-session-id"] = conversation.name
        response = self.client.chat.completions.create(
            model=self.model, messages=messages, extra_headers=headers
        )
        conversation.answered(response.choices[0].message.content or "")
        assert response.usage is not None
        details = response.usage.prompt_tokens_details
        self.cached += details.cached_tokens or 0 if details else 0
        self.prompt += response.usage.prompt_tokens
        self.prompts.setdefault(conversation.name, []).append(messages)
        [served] = recorded(self.sim, request_id)
        return served.replica

    def run(self, conversations: list[Conversation], turns: range) -> dict[str, list[int]]:
        """Turn by turn across all conversations, as concurrent agents would interleave."""
        landed: dict[str, list[int]] = {c.name: [] for c in conversations}
        for number in turns:
            for conversation in conversations:
                landed[conversation.name].append(self.turn(conversation, number))
        return landed

    def ideal_ratio(self) -> float:
        cached = prompt = 0
        for prompts in self.prompts.values():
            c, p = ideal_cached_tokens(prompts)
            cached, prompt = cached + c, prompt + p
        return cached / prompt


@pytest.mark.parametrize("header", [True, False], ids=["x-session-id", "prompt-family"])
def test_every_turn_lands_on_its_sessions_replica_and_hits_as_well_as_ideal(
    client: openai.OpenAI, sim: RunningSimulator, header: bool
) -> None:
    replay = Replay(client, sim, "chat", header)
    landed = replay.run([Conversation.new(f"aff{i}") for i in range(SESSIONS)], range(TURNS))
    assert all(len(set(replicas)) == 1 for replicas in landed.values())
    homes = Counter(replicas[0] for replicas in landed.values())
    assert len(homes) == REPLICAS  # the sessions are spread over the pool, not piled on one
    assert replay.prompt > 0
    assert replay.cached / replay.prompt == pytest.approx(replay.ideal_ratio())


def test_round_robin_scatters_sessions_and_misses(client: openai.OpenAI, sim: RunningSimulator) -> None:
    replay = Replay(client, sim, "chat-rr", header=True)
    landed = replay.run([Conversation.new(f"rr{i}") for i in range(SESSIONS)], range(TURNS))
    assert all(len(set(replicas)) > 1 for replicas in landed.values())
    # A turn hits only when it comes back to a replica an earlier turn of its session used.
    assert replay.cached / replay.prompt < 0.5 * replay.ideal_ratio()


def test_a_lost_replica_moves_only_its_sessions_and_they_come_back(
    client: openai.OpenAI, sim: RunningSimulator
) -> None:
    replay = Replay(client, sim, "chat", header=True)
    conversations = [Conversation.new(f"loss{i}") for i in range(20)]
    home = {name: replicas[0] for name, replicas in replay.run(conversations, range(1)).items()}
    lost = Counter(home.values()).most_common(1)[0][0]
    sim.faults.down(lost)
    during = replay.run(conversations, range(1, 3))  # every request still answered
    for conversation in conversations:
        replicas = during[conversation.name]
        if home[conversation.name] == lost:
            assert len(set(replicas)) == 1  # moved, once, and stays where it moved
            assert replicas[0] != lost
        else:
            assert replicas == [home[conversation.name]] * 2  # untouched
    moved = [c for c in conversations if home[c.name] == lost]
    assert moved
    sim.faults.up(lost)
    number = iter(range(3, 1000))
    assert eventually(lambda: replay.turn(moved[0], next(number)) == lost, seconds=10)
    back = replay.run(conversations, range(1000, 1001))
    assert {name: replicas[0] for name, replicas in back.items()} == home


def test_workers_ai_gets_the_prompt_family_as_its_session_affinity(
    client: openai.OpenAI, sim: RunningSimulator
) -> None:
    keys: dict[str, set[str | None]] = {}
    instances: dict[str, set[int | None]] = {}
    for conversation in [Conversation.new(f"wai{i}") for i in range(8)]:
        for number in range(3):
            request_id = f"{conversation.name}-{number}"
            response = client.chat.completions.create(
                model="kimi", messages=conversation.ask(number), extra_headers={"x-request-id": request_id}
            )
            conversation.answered(response.choices[0].message.content or "")
            [served] = recorded(sim, request_id)
            keys.setdefault(conversation.name, set()).add(served.headers.get("x-session-affinity"))
            instances.setdefault(conversation.name, set()).add(served.workers_ai_replica)
            if number:
                details = response.usage.prompt_tokens_details if response.usage else None
                assert details is not None
                assert details.cached_tokens
    assert all(len(found) == 1 and None not in found for found in keys.values())
    assert len({next(iter(found)) for found in keys.values()}) == len(keys)  # one key per conversation
    assert all(len(found) == 1 for found in instances.values())
