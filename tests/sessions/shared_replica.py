"""Many sessions at once on one simulator replica, through a gateway, compacting or not: the
run of `test_compaction_shared_replica.py`, shared with `bench.sessions`."""

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


async def run(
    tmp_path: Path, compact: bool, cache_blocks: int = CACHE_BLOCKS
) -> tuple[float, list[list[int]], int]:
    """Every session at once on one fresh replica: its hit ratio (cached / prompt tokens over
    everything it served, summaries included), each session's inputs, the longest summary
    sent upstream (in tokens)."""
    checkpoints = {"mode": "compact", "every_turns": EVERY, "summarizer": "cheap"} if compact else {}
    sim: RunningSimulator
    with Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, cache_blocks=cache_blocks)) as sim:
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
