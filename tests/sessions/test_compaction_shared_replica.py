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

from pathlib import Path

from tests.sessions.shared_replica import CACHE_BLOCKS, SESSIONS, run
from tests.sessions.test_checkpoints import EVERY


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
