"""A split's chooser: weighted, sticky per session, stable across processes."""

from __future__ import annotations

import hashlib
from collections import Counter

from gateway.exchange import Candidate
from gateway.routing.split import Split

K26 = Candidate("workers-ai", "@cf/moonshotai/kimi-k2.6", weight=90)
POOL = Candidate("gpu-pool", "kimi-k2.6", weight=10)
FALLBACK = Candidate("backup", "kimi-k2.6")


def sessions(n: int) -> list[str]:
    """Session keys as admit makes them (tenant-scoped SHA-256, 32 hex digits); fixed, so the
    shares below are the same on every run."""
    return [hashlib.sha256(f"acme\x00session-{i}".encode()).hexdigest()[:32] for i in range(n)]


def test_a_90_10_split_over_2000_sessions_lands_within_2_percent_of_its_weights() -> None:
    split = Split([K26, POOL, FALLBACK])
    keys = sessions(2_000)
    arms = Counter(split.arm(key, [K26, POOL, FALLBACK]) for key in keys)
    assert set(arms) == {K26, POOL}
    assert abs(arms[K26] / 2_000 - 0.90) <= 0.02
    assert abs(arms[POOL] / 2_000 - 0.10) <= 0.02


def test_every_session_stays_on_one_arm_and_another_process_agrees() -> None:
    keys = sessions(2_000)
    first = Split([K26, POOL, FALLBACK])
    again = Split([K26, POOL, FALLBACK])  # what another worker or replica builds from the same config
    for key in keys:
        arm = first.arm(key, [K26, POOL, FALLBACK])
        assert all(first.arm(key, [K26, POOL, FALLBACK]) == arm for _ in range(3))
        assert again.arm(key, [K26, POOL, FALLBACK]) == arm


def test_the_arm_goes_first_and_the_rest_stay_as_fallbacks() -> None:
    split = Split([K26, POOL, FALLBACK])
    for key in sessions(50):
        ordered = split.ordered(key, [K26, POOL, FALLBACK])
        assert ordered[0] == split.arm(key, [K26, POOL, FALLBACK])
        assert sorted(ordered, key=id) == sorted([K26, POOL, FALLBACK], key=id)
        assert ordered[-1] == FALLBACK


def test_an_arm_the_policy_removed_is_never_chosen() -> None:
    split = Split([K26, POOL, FALLBACK])
    assert all(split.ordered(key, [POOL, FALLBACK])[0] == POOL for key in sessions(200))
    assert split.ordered("s", [FALLBACK]) == [FALLBACK]


def test_raising_one_weight_moves_sessions_only_towards_it() -> None:
    pool_30 = Candidate(POOL.upstream, POOL.model, weight=30)
    before, after = Split([K26, POOL]), Split([K26, pool_30])
    keys = sessions(2_000)
    was = {k: before.arm(k, [K26, POOL]) for k in keys}
    now = {k: after.arm(k, [K26, pool_30]) for k in keys}
    moved = [k for k in keys if (was[k] is K26) != (now[k] is K26)]
    assert moved  # some sessions move to the heavier arm...
    assert all(was[k] is K26 and now[k] is pool_30 for k in moved)  # ...and none away from it


def test_one_weighted_candidate_is_no_split() -> None:
    assert not Split([K26, FALLBACK])
    assert Split([K26, POOL])
