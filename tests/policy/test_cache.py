"""The decision cache: per revision, bounded, optionally expiring."""

from __future__ import annotations

from gateway.policy.cache import DecisionCache
from gateway.policy.decision import Decision

ALLOW = Decision(allow=True)


def test_a_stored_decision_is_found_for_its_revision_and_key() -> None:
    cache = DecisionCache(10)
    cache.put("r1", b"k", ALLOW, {"allow": True})
    hit = cache.get("r1", b"k")
    assert hit is not None and hit.decision is ALLOW and hit.raw == {"allow": True}
    assert cache.get("r1", b"other") is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_new_revision_empties_the_cache() -> None:
    cache = DecisionCache(10)
    cache.put("r1", b"k", ALLOW, None)
    assert cache.get("r2", b"k") is None
    assert len(cache) == 0
    assert cache.invalidations == 1
    assert cache.get("r1", b"k") is None  # never comes back


def test_the_least_recently_used_entry_goes_first() -> None:
    cache = DecisionCache(2)
    cache.put("r", b"a", ALLOW, None)
    cache.put("r", b"b", ALLOW, None)
    assert cache.get("r", b"a") is not None
    cache.put("r", b"c", ALLOW, None)
    assert cache.get("r", b"b") is None
    assert cache.get("r", b"a") is not None and cache.get("r", b"c") is not None
    assert (len(cache), cache.evictions) == (2, 1)


def test_entries_expire_after_the_ttl() -> None:
    now = [100.0]
    cache = DecisionCache(10, ttl_s=5, clock=lambda: now[0])
    cache.put("r", b"k", ALLOW, None)
    now[0] = 104.9
    assert cache.get("r", b"k") is not None
    now[0] = 105.1
    assert cache.get("r", b"k") is None
