"""The pool's choice of replica: affinity with bounded load, round robin, least loaded, health."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.ports import Health
from gateway.routing.circuit import BreakerSettings, CircuitState
from gateway.routing.pool import PoolSettings, ReplicaPool
from gateway.routing.rendezvous import ranked, stable_hash

REPLICAS = [f"http://127.0.0.1:{9000 + i}/v1" for i in range(4)]
BREAKER = BreakerSettings(failure_threshold=2, cooldown_s=10.0, probe_failures=1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pool(clock: Clock | None = None, **settings: object) -> ReplicaPool:
    return ReplicaPool(REPLICAS, PoolSettings(breaker=BREAKER, **settings), clock or Clock())  # type: ignore[arg-type]


def _preferred(key: str) -> list[int]:
    return ranked(stable_hash(key), [stable_hash(r) for r in REPLICAS])


def _take(pool: ReplicaPool, key: str | None) -> int:
    replica = pool.acquire(key)
    assert replica is not None
    return replica


def test_a_session_always_gets_its_replica() -> None:
    pool = _pool()
    for key in (f"s{i}" for i in range(50)):
        for _ in range(3):
            replica = _take(pool, key)
            pool.release(replica)
            assert replica == _preferred(key)[0]


def test_two_pools_on_the_same_replicas_agree() -> None:
    # Two gateway processes: no shared state, the same answers.
    one, two = _pool(), ReplicaPool(list(REPLICAS), PoolSettings(breaker=BREAKER), Clock())
    for key in (f"s{i}" for i in range(100)):
        assert _take(one, key) == _take(two, key)


def test_an_overloaded_replica_spills_to_the_next_choice() -> None:
    pool = _pool(min_load_bound=2, bounded_load_factor=1.25)
    order = _preferred("hot")
    assert [_take(pool, "hot") for _ in range(2)] == [order[0]] * 2  # within the floor
    # A third on the same replica would be over max(2, ceil(1.25 * 3 / 4)) = 2.
    assert _take(pool, "hot") == order[1]
    pool.release(order[0])
    assert _take(pool, "hot") == order[0]  # room again: back home


def test_spill_keeps_every_replica_within_the_bound() -> None:
    pool = _pool(min_load_bound=1, bounded_load_factor=1.25)
    for _ in range(40):
        _take(pool, "one-hot-session")
    loads = [status.in_flight for status in pool.status()]
    assert sum(loads) == 40
    assert max(loads) <= 13  # ceil(1.25 * 40 / 4)


def test_an_open_circuit_moves_only_its_sessions_and_they_come_back() -> None:
    clock = Clock()
    pool = _pool(clock)
    keys = [f"s{i}" for i in range(200)]
    home = {key: _preferred(key)[0] for key in keys}
    for _ in range(BREAKER.failure_threshold):
        pool.failed(1, counts=True)
    assert pool.status()[1].circuit is CircuitState.OPEN
    for key in keys:
        replica = _take(pool, key)
        pool.release(replica)
        assert replica == (home[key] if home[key] != 1 else _preferred(key)[1])
    pool.probed(1, Health.UP)  # half-open: one trial
    trial_key = next(key for key in keys if home[key] == 1)
    assert _take(pool, trial_key) == 1
    pool.succeeded(1, 0.01)
    pool.release(1)
    for key in keys:
        replica = _take(pool, key)
        pool.release(replica)
        assert replica == home[key]


def test_failures_that_do_not_count_leave_the_circuit_closed() -> None:
    pool = _pool()
    for _ in range(10):
        pool.failed(2, counts=False)
    assert pool.status()[2].circuit is CircuitState.CLOSED


def test_tried_replicas_are_skipped_and_then_there_is_none() -> None:
    pool = _pool()
    order = _preferred("s")
    tried: set[int] = set()
    for expected in order:
        replica = pool.acquire("s", tried)
        assert replica == expected
        tried.add(replica)
    assert pool.acquire("s", tried) is None


def test_with_every_circuit_open_only_the_last_resort_gets_one() -> None:
    pool = _pool()
    for replica in range(4):
        pool.probed(replica, Health.DOWN)
    assert pool.acquire("s") is None
    assert pool.acquire("s", respect_health=False) == _preferred("s")[0]


def test_single_endpoint() -> None:
    pool = ReplicaPool(["http://one/v1"], PoolSettings(breaker=BREAKER), Clock())
    assert pool.acquire("s") == 0
    assert pool.acquire(None) == 0
    assert pool.acquire("s", tried={0}) is None
    pool.probed(0, Health.UNREACHABLE)  # two requests in flight: only a refused connection counts
    assert pool.acquire("s") is None
    assert pool.acquire("s", respect_health=False) == 0


def test_round_robin_cycles_whatever_the_key() -> None:
    pool = _pool(balance="round_robin")
    taken = [_take(pool, "same-session") for _ in range(8)]
    assert taken == [0, 1, 2, 3, 0, 1, 2, 3]


def test_round_robin_skips_an_open_circuit() -> None:
    pool = _pool(balance="round_robin")
    pool.probed(2, Health.DOWN)
    assert Counter(_take(pool, None) for _ in range(9)) == {0: 3, 1: 3, 3: 3}


@pytest.mark.parametrize("balance", ["least_loaded", "affinity"])
def test_least_loaded_and_keyless_affinity_fill_the_emptiest(balance: str) -> None:
    pool = _pool(balance=balance)
    taken = [_take(pool, None) for _ in range(8)]
    assert Counter(taken) == {0: 2, 1: 2, 2: 2, 3: 2}
    pool.release(3)
    assert _take(pool, None) == 3


def test_release_counts_down_and_status_reports() -> None:
    pool = _pool()
    replica = _take(pool, "s")
    assert pool.status()[replica].in_flight == 1
    pool.succeeded(replica, 0.5)
    pool.succeeded(replica, 1.5)
    pool.release(replica)
    status = pool.status()[replica]
    assert status.in_flight == 0
    assert status.address == REPLICAS[replica]
    assert status.ttfb_s == pytest.approx(0.7)  # moving average, 0.2 of each new sample


def test_a_busy_replica_is_not_marked_down_by_probes_it_leaves_unanswered() -> None:
    clock = Clock()
    pool = _pool(clock, busy_grace_s=30.0)
    replica = _take(pool, "long-prefill")  # in flight: a server serving one request at a time
    for _ in range(5):
        pool.probed(replica, Health.SILENT)
        pool.probed(replica, Health.DOWN)  # "no slot available" is busy too
    assert pool.status()[replica].circuit is CircuitState.CLOSED
    pool.succeeded(replica, 40.0)
    pool.release(replica)
    clock.now += 29.0  # answered lately: still busy, not down
    pool.probed(replica, Health.SILENT)
    assert pool.status()[replica].circuit is CircuitState.CLOSED
    clock.now += 2.0  # idle past the grace: an unanswered probe counts again
    pool.probed(replica, Health.SILENT)
    assert pool.status()[replica].circuit is CircuitState.OPEN


def test_a_refused_connection_counts_even_against_a_busy_replica() -> None:
    pool = _pool()
    replica = _take(pool, "s")
    pool.probed(replica, Health.UNREACHABLE)
    assert pool.status()[replica].circuit is CircuitState.OPEN
    assert pool.status()[replica].probe is Health.UNREACHABLE
