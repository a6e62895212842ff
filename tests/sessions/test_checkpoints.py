"""Checkpoints on the simulator: advise mode says when one is due; compact mode summarizes
older turns through the gateway's own pipeline and sends the summary in their place, keeping
the upstream's input bounded while the client re-sends its whole history; a summarizer that
fails or is too slow leaves the turn served uncompacted."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.state.sqlite import SQLiteStore
from gateway.stages.admit import scoped_session_key
from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import captured_logs, free_port, openai_upstream
from tests.servers import TEST_KEY, UPSTREAM_KEY, gateway_config, running_gateway
from tests.sessions.chats import chats

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 8}
EVERY = 8
TURNS = 40
CACHE_BLOCKS = 64  # 1,024 tokens: less than the uncompacted history, as on a replica shared by many


def question(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"Question {n}: " + "please tell me more about this " * 6}


@pytest.fixture
def small_cache_sim() -> Iterator[RunningSimulator]:
    with Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, cache_blocks=CACHE_BLOCKS)) as sim:
        yield sim


def config(sim: RunningSimulator, tmp_path: Path, checkpoints: dict[str, Any], **upstreams: Any) -> Any:
    return gateway_config(
        upstreams={"local": openai_upstream(sim.openai_base_url(0)), **upstreams},
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "cheap": [{"upstream": next(iter(upstreams), "local"), "model": "sim-model"}],
        },
        state={"sqlite_path": str(tmp_path / "state.db")},
        prices={"sim-model": {"input": 1.0, "output": 2.0}},
        sessions={"enabled": True, "checkpoints": checkpoints},
    )


def converse(url: str, session: str, turns: int) -> list[httpx.Response]:
    history: list[Any] = [SYSTEM]
    responses = []
    headers = {"authorization": f"Bearer {TEST_KEY}", "x-session-id": session}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for n in range(turns):
            history.append(question(n))
            response = client.post("/v1/chat/completions", json={"model": "chat", "messages": history})
            assert response.status_code == 200, response.text
            history.append(response.json()["choices"][0]["message"])
            responses.append(response)
    return responses


def cache_ratio(sim: RunningSimulator) -> float:
    [stats] = sim.replica_stats()
    return stats["cached_tokens"] / stats["prompt_tokens"]


def turn_requests(sim: RunningSimulator) -> list[Any]:
    """The upstream requests of the session's turns (the summaries end with the instruction)."""
    return [r for r in chats(sim) if not r.body["messages"][-1]["content"].startswith("Summarize")]


def test_compaction_keeps_the_upstreams_input_bounded_and_its_prefix_cache_hitting(
    small_cache_sim: RunningSimulator, tmp_path: Path
) -> None:
    sim = small_cache_sim
    (tmp_path / "plain").mkdir()
    with running_gateway(config(sim, tmp_path / "plain", {})) as gateway:
        plain = converse(gateway.url, f"plain-{uuid.uuid4().hex}", TURNS)
    plain_ratio = cache_ratio(sim)
    sim.clear()
    with Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, cache_blocks=CACHE_BLOCKS)) as fresh:
        compact = {"mode": "compact", "every_turns": EVERY, "summarizer": "cheap"}
        session = f"compact-{uuid.uuid4().hex}"
        with running_gateway(config(fresh, tmp_path, compact)) as gateway:
            compacted = converse(gateway.url, session, TURNS)
        compact_ratio = cache_ratio(fresh)
        turns = turn_requests(fresh)
        summaries = [r for r in chats(fresh) if r not in turns]
    plain_inputs = [r.json()["usage"]["prompt_tokens"] for r in plain]
    inputs = [r.json()["usage"]["prompt_tokens"] for r in compacted]
    assert len(turns) == TURNS
    assert len(summaries) == TURNS // EVERY - 1 or len(summaries) == TURNS // EVERY
    # The upstream never gets more than the system prompt, the summary, and the turns since
    # the last checkpoint (at most EVERY, and the new question), whatever the client re-sends.
    for request in turns:
        assert len(request.body["messages"]) <= 1 + 1 + 2 * EVERY + 1
    summary_tokens = max(len(str(r.body["messages"][1]["content"])) for r in turns) // 4
    bound = plain_inputs[EVERY] + summary_tokens + 32
    assert max(inputs) <= bound < plain_inputs[-1]
    assert inputs[-1] < plain_inputs[-1] / 2
    assert compacted[-1].headers["x-tollgate-checkpoint"] == "compacted"
    assert compact_ratio >= plain_ratio
    found, ledger = asyncio.run(stored(tmp_path / "state.db", session))
    assert found is not None
    assert found.turns == TURNS  # summaries are no turns of the session
    assert len(found.checkpoints) == len(summaries)
    assert found.checkpoints[-1].tokens_before > found.checkpoints[-1].tokens_after
    assert found.input_tokens == sum(inputs)
    # The summaries were metered to the same tenant and key, as requests of their own.
    assert sum(row.requests for row in ledger) == TURNS + len(summaries)


async def stored(path: Path, session: str) -> tuple[Any, list[Any]]:
    store = SQLiteStore(path)
    try:
        today = datetime.now(UTC).date().isoformat()
        return await store.session("alpha", scoped_session_key("alpha", session)), await store.spend(
            ("alpha",), today, today
        )
    finally:
        await store.aclose()


def test_advise_mode_says_when_a_checkpoint_is_due(upstream: RunningSimulator, tmp_path: Path) -> None:
    advise = {"mode": "advise", "every_turns": 3}
    with running_gateway(config(upstream, tmp_path, advise)) as gateway:
        session = f"advise-{uuid.uuid4().hex}"
        responses = converse(gateway.url, session, 7)
        due = [n + 1 for n, r in enumerate(responses) if r.headers.get("x-tollgate-checkpoint") == "due"]
        assert due == [3, 6]
        record = httpx.get(
            f"{gateway.url}/v1/sessions/{session}", headers={"authorization": f"Bearer {TEST_KEY}"}
        ).json()
    assert record["checkpoint_due"] == {"reason": "every_turns 3", "turn": 6}
    assert record["checkpoints"] == []
    assert all(len(r.body["messages"]) % 2 == 0 for r in chats(upstream))  # nothing was rewritten


@pytest.mark.parametrize("failure", ["refused", "timeout"])
def test_a_summarizer_that_fails_leaves_the_turn_served_uncompacted(
    upstream: RunningSimulator, paced_sim: RunningSimulator, tmp_path: Path, failure: str
) -> None:
    broken = (
        {"broken": openai_upstream(f"http://127.0.0.1:{free_port()}/v1", retries=0)}
        if failure == "refused"
        else {"broken": openai_upstream(paced_sim.openai_base_url(0))}
    )
    # A refused summary fails at once, however busy the machine: its time limit is left wide
    # so that only the refusal can fail it; the paced one takes seconds, well over 0.3 s.
    timeout_s = 0.3 if failure == "timeout" else 10.0
    compact = {"mode": "compact", "every_turns": 2, "summarizer": "cheap", "timeout_s": timeout_s}
    with running_gateway(config(upstream, tmp_path, compact, **broken)) as gateway, captured_logs() as logs:
        responses = converse(gateway.url, f"failing-{uuid.uuid4().hex}", 4)
    assert all("x-tollgate-checkpoint" not in r.headers for r in responses)
    turns = chats(upstream)
    assert [len(r.body["messages"]) for r in turns] == [2, 4, 6, 8]  # every turn whole
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    failures = [line for line in lines if line["msg"].startswith("session summary failed")]
    assert failures
    assert {line["reason"] for line in failures} == {"timeout" if failure == "timeout" else "failed"}


def test_compaction_above_a_token_count_keeps_the_input_near_it(
    small_cache_sim: RunningSimulator, tmp_path: Path
) -> None:
    compact = {"mode": "compact", "above_tokens": 500, "summarizer": "cheap", "keep_last": 2}
    with running_gateway(config(small_cache_sim, tmp_path, compact)) as gateway:
        responses = converse(gateway.url, f"above-{uuid.uuid4().hex}", 16)
    inputs = [r.json()["usage"]["prompt_tokens"] for r in responses]
    summaries = [r for r in chats(small_cache_sim) if r not in turn_requests(small_cache_sim)]
    assert summaries  # the history passed 500 tokens, more than once
    # Over the threshold only for the turn that made a checkpoint, by at most one turn's growth.
    growth = max(b - a for a, b in itertools.pairwise(inputs[:4]))
    assert max(inputs) <= 500 + 2 * growth
    assert inputs[-1] < 500 + growth
