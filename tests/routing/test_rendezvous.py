"""Rendezvous hashing: the same choice everywhere, an even spread, and minimal movement."""

from __future__ import annotations

from collections import Counter

from gateway.routing.rendezvous import load_bound, ranked, stable_hash

REPLICAS = [f"http://10.0.0.{i}:8000/v1" for i in range(1, 5)]
HASHES = [stable_hash(r) for r in REPLICAS]
KEYS = [f"session-{i}" for i in range(8000)]


def _owner(key: str, hashes: list[int]) -> int:
    return ranked(stable_hash(key), hashes)[0]


def test_stable_hash_is_the_same_in_every_process() -> None:
    # A fixed value: `hash()` would differ between processes (PYTHONHASHSEED), and gateway
    # processes that disagree would split a session between replicas.
    assert stable_hash("session-1") == 0xACE763D42CBD49AE
    assert stable_hash("a") != stable_hash("b")


def test_ranking_is_a_permutation_and_deterministic() -> None:
    for key in KEYS[:100]:
        order = ranked(stable_hash(key), HASHES)
        assert sorted(order) == [0, 1, 2, 3]
        assert ranked(stable_hash(key), list(HASHES)) == order


def test_keys_spread_evenly() -> None:
    counts = Counter(_owner(key, HASHES) for key in KEYS)
    expected = len(KEYS) / len(REPLICAS)
    assert set(counts) == {0, 1, 2, 3}
    assert all(abs(n - expected) < 0.1 * expected for n in counts.values()), counts


def test_removing_a_replica_moves_only_its_keys_each_to_its_second_choice() -> None:
    before = {key: ranked(stable_hash(key), HASHES) for key in KEYS}
    survivors = [0, 1, 3]  # replica 2 is gone
    for key, order in before.items():
        after = survivors[_owner(key, [HASHES[i] for i in survivors])]
        if order[0] != 2:
            assert after == order[0]
        else:
            assert after == order[1]


def test_adding_a_replica_takes_about_one_in_n_plus_one_keys_all_to_itself() -> None:
    grown = [*HASHES, stable_hash("http://10.0.0.5:8000/v1")]
    moved = 0
    for key in KEYS:
        old, new = _owner(key, HASHES), _owner(key, grown)
        if old != new:
            assert new == 4
            moved += 1
    assert abs(moved - len(KEYS) / 5) < 0.1 * len(KEYS) / 5


def test_order_does_not_depend_on_the_replicas_listing_order() -> None:
    reversed_hashes = HASHES[::-1]
    for key in KEYS[:200]:
        assert REPLICAS[_owner(key, HASHES)] == REPLICAS[::-1][_owner(key, reversed_hashes)]


def test_load_bound() -> None:
    assert load_bound(0, 4, 1.25, 1) == 1
    assert load_bound(15, 4, 1.25, 1) == 5  # ceil(1.25 * 16 / 4)
    assert load_bound(15, 4, 1.25, 8) == 8  # the floor keeps light load where it hashes
    for total in range(200):
        # Some replica is always under the bound, so a request always finds one.
        assert load_bound(total, 4, 1.25, 1) * 4 > total
