"""bench.sessions, compaction on a replica shared by many sessions: 32 sessions of 40 turns at
once on one simulator replica, through a gateway, without and with compact checkpoints every
8 turns (the run of `tests/sessions/test_compaction_shared_replica.py`), for several sizes of
the replica's prefix cache: what each session's share of it must be for compaction to raise
the hit ratio, and where it lowers it."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from tests.sessions.shared_replica import SESSIONS, run

BLOCK_TOKENS = 16  # the simulator's default block
SWEEP = (1024, 2048, 4096, 8192)  # cache blocks: 512 to 4,096 tokens a session


def shared_runs() -> dict[str, Any]:
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-shared-") as tmp:
        for blocks in SWEEP:
            for compact in (False, True):
                directory = Path(tmp) / f"{blocks}-{compact}"
                directory.mkdir()
                ratio, inputs, _ = asyncio.run(run(directory, compact, blocks))
                runs[f"{blocks}/{'on' if compact else 'off'}"] = {
                    "ratio": ratio,
                    "input": sum(sum(i) for i in inputs),
                    "max": max(max(i) for i in inputs),
                }
    return runs


def shared_lines(runs: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"{SESSIONS} such sessions at once on one replica (each its own system prompt), all compacting or "
        "none, by the size of the replica's prefix cache (hit ratio over everything the replica "
        "served, summaries included):",
        "",
        "| prefix cache | a session's share | hit ratio, compaction off | on | upstream input off / on "
        "| longest prompt off / on |",
        "|---|---|---|---|---|---|",
    ]
    for blocks in SWEEP:
        off, on = runs[f"{blocks}/off"], runs[f"{blocks}/on"]
        share = blocks * BLOCK_TOKENS // SESSIONS
        lines.append(
            f"| {blocks} blocks | {share:,} tokens | {off['ratio']:.3f} | {on['ratio']:.3f} "
            f"| {off['input']:,} / {on['input']:,} | {off['max']:,} / {on['max']:,} |"
        )
    wins = [b for b in SWEEP if runs[f"{b}/on"]["ratio"] >= runs[f"{b}/off"]["ratio"]]
    loses = [b for b in SWEEP if b not in wins]

    def shares(sizes: list[int]) -> str:
        return ", ".join(f"{b * BLOCK_TOKENS // SESSIONS:,}" for b in sizes) or "none"

    lines += [
        "",
        f"Compaction's ratio is at least as high as without it where a session's share of the cache "
        f"is {shares(wins)} tokens, and lower where it is {shares(loses)} tokens (the sessions' "
        "histories reach about 3,100 tokens uncompacted). The simulator's cache evicts a sequence's "
        "tail before its head, as vLLM and SGLang do, so an uncompacted session short of room keeps "
        "its opening and loses its latest turns: compaction wins only once the share is well below the "
        "history. A production replica serving many agent sessions whose histories run to tens of "
        "thousands of tokens is in that case; a lightly loaded one is not. Checkpoints chain (each new "
        "summary is appended to the last one, so the system prompt and the earlier summaries stay a "
        "cached prefix), and the input per turn grows by at most one summary per checkpoint.",
    ]
    return lines
