"""Compaction on a replica shared by many sessions, as a real inference replica is: one
prefix cache serves 32 concurrent 40-turn sessions, each with a system prompt of its own, all
of one workflow (compacting every 8 turns, or not at all). The cache (2,048 blocks of 16
tokens) gives each session about 1,000 tokens, a third of the ~3,100 its history reaches: as
on a production replica, whose KV cache of some hundreds of thousands of tokens serves a
hundred agent sessions of tens of thousands each. Uncompacted, the histories outgrow their
share and lose their tails (the simulator evicts a sequence's tail before its head, as vLLM
and SGLang do); compacted, each prompt stays under ~750 tokens, within it. The replica's hit
ratio with compaction is at least as high as without, and each session's upstream input
stays bounded while its client re-sends the whole history.

Where the cache gives each session about two thirds of its history or more, compaction
lowers the ratio instead: the prompts are shorter, so each turn's new text is a larger share
of them, and every new summary is a miss (docs/benchmarks.md, Sessions, measures both)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from simulator import RunningSimulator, SimConfig, Simulator
from tests.servers import TEST_KEY, UPSTREAM_KEY, running_gateway
from tests.sessions.chats import chats
from tests.sessions.test_checkpoints import EVERY, TURNS, config

SESSIONS = 32
CACHE_BLOCKS = 2048


def system(index: int) -> dict[str, Any]:
    return {"role": "system", "content": f"You are the careful assistant of project {index}. " * 6}


def question(index: int, n: int) -> dict[str, Any]:
    return {
        "role": "user",
        "content": f"Project {index}, question {n}: " + "please tell me more about this " * 5,
    }


async def converse(client: httpx.AsyncClient, index: int) -> list[int]:
    """One session's TURNS turns, the whole history re-sent each time; the upstream's input
    tokens of each turn."""
    history: list[Any] = [system(index)]
    inputs = []
    for n in range(TURNS):
        history.append(question(index, n))
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "chat", "messages": history},
            headers={"x-session-id": f"shared-{index}"},
        )
        assert response.status_code == 200, response.text
        history.append(response.json()["choices"][0]["message"])
        inputs.append(response.json()["usage"]["prompt_tokens"])
    return inputs


async def run(tmp_path: Path, compact: bool) -> tuple[float, list[list[int]], int]:
    """Every session at once on one fresh replica: its hit ratio (cached / prompt tokens over
    everything it served, summaries included), each session's inputs, the longest summary
    sent upstream (in tokens)."""
    checkpoints = {"mode": "compact", "every_turns": EVERY, "summarizer": "cheap"} if compact else {}
    sim: RunningSimulator
    with Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, cache_blocks=CACHE_BLOCKS)) as sim:
        with running_gateway(config(sim, tmp_path, checkpoints)) as gateway:
            limits = httpx.Limits(max_connections=SESSIONS, max_keepalive_connections=SESSIONS)
            headers = {"authorization": f"Bearer {TEST_KEY}"}
            async with httpx.AsyncClient(
                base_url=gateway.url, headers=headers, limits=limits, timeout=60
            ) as c:
                inputs = await asyncio.gather(*(converse(c, i) for i in range(SESSIONS)))
        [stats] = sim.replica_stats()
        summaries = [
            len(str(m["content"])) // 4
            for r in chats(sim)
            for m in r.body["messages"]
            if m["role"] == "system" and str(m["content"]).startswith("Summary of the earlier part")
        ]
    return stats["cached_tokens"] / stats["prompt_tokens"], list(inputs), max(summaries, default=0)


async def test_on_a_replica_shared_by_many_sessions_compaction_keeps_its_cache_hitting(
    tmp_path: Path,
) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "compact").mkdir()
    plain_ratio, plain_inputs, _ = await run(tmp_path / "plain", compact=False)
    compact_ratio, compact_inputs, summary_tokens = await run(tmp_path / "compact", compact=True)
    # The setting is the one described: uncompacted, the histories outgrow the cache.
    share = CACHE_BLOCKS * 16 / SESSIONS
    assert all(inputs[-1] > 2 * share for inputs in plain_inputs)
    assert all(max(inputs) < share for inputs in compact_inputs)
    assert compact_ratio >= plain_ratio, (compact_ratio, plain_ratio)
    # Each session's upstream input is bounded: the system prompt, the summary and the turns
    # since the last checkpoint, whatever its client re-sends.
    for plain, compacted in zip(plain_inputs, compact_inputs, strict=True):
        bound = plain[EVERY] + summary_tokens + 32
        assert max(compacted) <= bound < plain[-1]
        assert compacted[-1] < plain[-1] / 2
