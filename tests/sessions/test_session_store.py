"""The session part of the StateStore contract, run against every adapter: a record updated
by the settle that carries it (once, however often the settle is repeated) or alone."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from adapters.state.redis import RedisStore
from gateway.metering.records import Settlement
from gateway.ports import StateStore
from gateway.sessions.records import Checkpoint, SessionRecord, SessionUpdate
from tests.metering.conftest import REDIS_URL


def update(session: str = "s1", tenant: str = "acme", **changes: object) -> SessionUpdate:
    fields: dict[str, object] = {
        "tenant": tenant,
        "session": session,
        "turn": 1,
        "input_tokens": 100,
        "cached_tokens": 40,
        "output_tokens": 10,
        "cost_micros": 500,
        "model": "chat",
        "upstream": "local",
        "replica": 1,
        "workflow": "triage",
        "decision_ids": (uuid.uuid4().hex,),
        "max_decisions": 3,
        "idle_s": 600,
    }
    fields.update(changes)
    return SessionUpdate(**fields)  # type: ignore[arg-type]


def settlement(session: SessionUpdate, reservation_id: str | None = None) -> Settlement:
    return Settlement(
        session.tenant, reservation_id or uuid.uuid4().hex, (), (), None, keep_s=600, session=session
    )


async def test_a_settle_creates_then_adds_to_the_record(store: StateStore) -> None:
    assert await store.session("acme", "s1") is None
    first = update(input_tokens=100)
    assert await store.settle(settlement(first))
    second = update(input_tokens=160, cached_tokens=90, workflow="", upstream="backup", replica=0)
    assert await store.settle(settlement(second))
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.turns == 2
    assert (record.input_tokens, record.cached_tokens, record.output_tokens) == (260, 130, 20)
    assert record.cost_micros == 1000
    assert (record.first_input, record.last_input, record.last_growth) == (100, 160, 60)
    assert record.growth_slope == 60
    assert (record.model, record.upstream, record.replica, record.workflow) == ("chat", "backup", 0, "triage")
    assert record.decision_ids == first.decision_ids + second.decision_ids
    assert record.first_seen_us <= record.last_seen_us


async def test_a_repeated_settle_counts_its_turn_once(store: StateStore) -> None:
    one = update()
    reservation = uuid.uuid4().hex
    assert await store.settle(settlement(one, reservation))
    assert not await store.settle(settlement(one, reservation))
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.turns == 1
    assert record.input_tokens == 100


# Within the Redis list's slack over the bound (nothing trimmed yet), and far past it.
@pytest.mark.parametrize("turns", [5, 40])
async def test_decision_ids_are_bounded_and_the_older_ones_counted(store: StateStore, turns: int) -> None:
    ids = [uuid.uuid4().hex for _ in range(turns)]
    for decision in ids:
        await store.update_session(update(decision_ids=(decision,)))
    await store.update_session(update(decision_ids=(), turn=0))
    for record in (await store.session("acme", "s1"), *(await store.sessions(("acme",), "tokens", 5))):
        assert record is not None
        assert record.decision_ids == tuple(ids[-3:])
        assert record.decisions_dropped == turns - 3


async def test_a_record_read_without_its_decision_ids_is_the_same_record_but_them(
    store: StateStore,
) -> None:
    checkpoint = Checkpoint(2, 3, "ab" * 32, "summary", 100, 10)
    for n in range(6):
        await store.update_session(update(checkpoint=checkpoint if n == 2 else None))
    whole = await store.session("acme", "s1")
    light = await store.session("acme", "s1", decisions=False)
    assert whole is not None and light is not None
    assert len(whole.decision_ids) == 3
    assert light.decision_ids == ()
    # The count of older ids may leave out those still held past the bound (Redis trims late)
    assert light.decisions_dropped <= whole.decisions_dropped
    assert light == whole._replace(decision_ids=(), decisions_dropped=light.decisions_dropped)
    assert await store.session("acme", "nobody", decisions=False) is None


async def test_a_request_not_served_adds_no_turn_but_keeps_its_decision(store: StateStore) -> None:
    await store.update_session(update())
    refused = update(turn=0, input_tokens=0, cached_tokens=0, output_tokens=0, cost_micros=0, model="")
    await store.update_session(refused)
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.turns == 1
    assert (record.model, record.upstream) == ("chat", "local")
    assert record.decision_ids[-1:] == refused.decision_ids


async def test_checkpoints_and_the_due_reason_are_kept(store: StateStore) -> None:
    checkpoint = Checkpoint(8, 15, "ab" * 32, "the user asked about [EMAIL]", 1200, 40)
    await store.update_session(update(due="every_turns 8", checkpoint=checkpoint, max_checkpoints=2))
    for turn in (16, 24):
        checkpoint_n = Checkpoint(turn, 31, "cd" * 32, "later", 900, 30)
        await store.update_session(update(checkpoint=checkpoint_n, max_checkpoints=2))
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.due == "every_turns 8"
    assert record.due_turn == 1
    assert [c.turn for c in record.checkpoints] == [16, 24]  # at most two, the newest
    await store.update_session(update(checkpoint=checkpoint, max_checkpoints=8))
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.checkpoints[-1] == checkpoint


async def test_sessions_are_the_tenants_own_and_listed_by_what_is_asked(store: StateStore) -> None:
    await store.update_session(update("big", input_tokens=5000, cost_micros=10))
    await store.update_session(update("dear", input_tokens=10, cost_micros=90_000))
    await asyncio.sleep(0.002)
    await store.update_session(update("recent", input_tokens=1, cost_micros=1))
    await store.update_session(update("big", tenant="other"))
    assert await store.session("other", "dear") is None
    by_tokens = await store.sessions(("acme",), "tokens", 10)
    assert [r.session for r in by_tokens] == ["big", "dear", "recent"]
    assert [r.session for r in await store.sessions(("acme",), "spend", 2)] == ["dear", "big"]
    assert [r.session for r in await store.sessions(("acme",), "last_seen", 1)] == ["recent"]
    both = await store.sessions(("acme", "other"), "tokens", 10)
    assert sorted((r.tenant, r.session) for r in both) == [
        ("acme", "big"),
        ("acme", "dear"),
        ("acme", "recent"),
        ("other", "big"),
    ]


async def test_a_record_expires_after_its_idle_time(store: StateStore) -> None:
    await store.update_session(update(idle_s=1))
    assert await store.session("acme", "s1") is not None
    await asyncio.sleep(1.2)
    assert await store.session("acme", "s1") is None
    assert await store.sessions(("acme",), "last_seen", 10) == []
    await store.update_session(update(idle_s=1))
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.turns == 1  # a fresh record, nothing left of the expired one


async def test_a_record_lives_on_while_its_turns_keep_coming(store: StateStore) -> None:
    for _ in range(5):  # 1.6 s of turns, each well within the idle time of the one before
        await store.update_session(update(idle_s=1))
        await asyncio.sleep(0.4)
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.turns == 5
    await asyncio.sleep(1.2)
    assert await store.session("acme", "s1") is None


async def test_checkpoints_live_as_long_as_their_record(store: StateStore) -> None:
    checkpoint = Checkpoint(8, 15, "ab" * 32, "the user asked about [EMAIL]", 1200, 40)
    await store.update_session(update(checkpoint=checkpoint, idle_s=1))
    await asyncio.sleep(0.7)
    await store.update_session(update(idle_s=1))  # a later turn, no checkpoint of its own
    await asyncio.sleep(0.7)
    record = await store.session("acme", "s1")
    assert record is not None
    assert record.checkpoints == (checkpoint,)


async def test_every_key_of_a_redis_record_expires_with_it(redis_prefix: str) -> None:
    """Expiries are renewed once per idle/64 of turns, not every turn: a decision list or a
    checkpoint list made between two renewals is given the record's own expiry."""
    store = RedisStore(REDIS_URL, redis_prefix)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        await store.update_session(update(idle_s=64, decision_ids=()))  # renewed: 65 s left
        await store.update_session(update(idle_s=64))  # the decision list, made now
        checkpoint = Checkpoint(2, 3, "ab" * 32, "summary", 100, 10)
        await store.update_session(update(idle_s=64, checkpoint=checkpoint))  # the checkpoints' list
        keys = list(client.scan_iter(match=f"{redis_prefix}:*"))
        lives = {key.decode().split("}:", 1)[1].split(":")[0]: client.pttl(key) for key in keys}
        assert set(lives) == {"sr", "sd", "sc", "sx"}, lives
        for life in lives.values():
            assert 64_000 < life <= 65_000
        assert max(lives.values()) - min(lives.values()) < 500
    finally:
        client.close()
        await store.aclose()


async def test_a_sessions_place_in_the_redis_index_is_renewed_with_its_expiry(redis_prefix: str) -> None:
    """The tenant's index `sx` scores a session when its keys' expiries are renewed (its first
    turn, then once per idle/64 of its turns), not on every turn; the listing still finds every
    live session and forgets one whose record expired."""
    store = RedisStore(REDIS_URL, redis_prefix)
    client = redis.Redis.from_url(REDIS_URL)
    index = f"{redis_prefix}:{{acme}}:sx"
    try:
        await store.update_session(update("s1", idle_s=128))  # new: indexed
        first = client.zscore(index, "s1")
        assert first is not None
        await store.update_session(update("s1", idle_s=128))
        assert await store.settle(settlement(update("s1", idle_s=128)))
        assert client.zscore(index, "s1") == first  # within idle/64 (2 s) of the last renewal
        await store.update_session(update("gone", idle_s=1))
        await asyncio.sleep(2.2)  # past idle/64 of s1's renewal; `gone` has expired
        await store.update_session(update("s1", idle_s=128))
        renewed = client.zscore(index, "s1")
        assert renewed is not None and renewed >= first + 2000
        await store.update_session(update("s2", idle_s=128))
        listed = await store.sessions(("acme",), "last_seen", 10)
        assert [(r.session, r.turns) for r in listed] == [("s2", 1), ("s1", 4)]
        assert client.zscore(index, "gone") is None  # the listing forgot it
    finally:
        client.close()
        await store.aclose()


def _story(session: str) -> list[SessionUpdate]:
    """Turns of one session: served and not, the model, upstream and workflow changed, a due
    reason, checkpoints, and the bounds changed midway (a reload)."""
    first = Checkpoint(2, 5, "ab" * 32, "earlier", 900, 30)
    second = Checkpoint(4, 9, "cd" * 32, "later", 1200, 40)
    refused = {"turn": 0, "input_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "cost_micros": 0}
    return [
        update(session, input_tokens=100, decision_ids=("a1",), max_checkpoints=2),
        update(session, decision_ids=("a2",), model="", upstream="", **refused),
        update(session, input_tokens=130, decision_ids=("a3", "a4"), checkpoint=first, due="every_turns 2"),
        update(session, input_tokens=90, decision_ids=(), upstream="backup", replica=2, workflow="search"),
        update(session, input_tokens=170, decision_ids=("a5", "a6"), max_decisions=2, checkpoint=second),
        update(session, input_tokens=60, decision_ids=("a7",), max_decisions=2, max_checkpoints=1),
        update(session, decision_ids=("a8", "a9"), model="", max_decisions=5, **refused),
        update(session, input_tokens=80, decision_ids=("b1",), max_decisions=5, model="big"),
    ]


def _same(record: SessionRecord | None) -> tuple[object, ...]:
    assert record is not None
    fields = tuple(record)
    return fields[:1] + fields[4:]  # all but the session key and the times seen


async def test_a_record_read_after_every_turn_is_the_one_read_once_at_the_end(store: StateStore) -> None:
    """Reads between turns change nothing: the record is the one the turns give applied one
    after another, whatever a store keeps between two reads."""
    read_often, read_once = uuid.uuid4().hex, uuid.uuid4().hex
    for mine, theirs in zip(_story(read_often), _story(read_once), strict=True):
        await store.update_session(mine)
        assert await store.session("acme", read_often, decisions=False) is not None
        await store.update_session(theirs)
    often = await store.session("acme", read_often)
    assert _same(often) == _same(await store.session("acme", read_once))
    assert often is not None
    assert (often.turns, often.input_tokens, often.last_input, often.last_growth) == (6, 630, 80, 20)
    assert (often.model, often.upstream, often.replica, often.workflow) == ("big", "local", 1, "triage")
    assert often.decision_ids == ("a6", "a7", "a8", "a9", "b1")
    assert often.decisions_dropped == 5
    assert [c.turn for c in often.checkpoints] == [2, 4]  # trimmed only when one is added
    assert (often.due, often.due_turn) == ("every_turns 2", 2)


async def test_a_record_an_earlier_version_kept_as_a_hash_is_read_then_converted(redis_prefix: str) -> None:
    """A record written before records were packed (a hash, `s:<session>`) is read as it is,
    by admission, by the record's script and by the listing; the next turn goes on from it in
    the packed record, which readers take from then on (the hash, left to expire, no longer
    counts)."""
    store = RedisStore(REDIS_URL, redis_prefix)
    client = redis.Redis.from_url(REDIS_URL)
    base = f"{redis_prefix}:{{acme}}:"
    expires = int(client.time()[0]) * 1000 + 600_000
    try:
        client.hset(
            base + "s:old",
            mapping={
                "f": 1_000_000, "l": 2_000_000, "t": 3, "i": 300, "c": 120, "o": 30, "u": 1500,
                "fi": 90, "li": 110, "g": 10, "m": "chat", "up": "local", "r": 1, "w": "triage",
                "dd": 4, "due": "every_turns 3", "dt": 3, "k": 0, "x": expires, "dk": 2,
            },
        )  # fmt: skip
        client.rpush(base + "sd:old", "d1", "d2", "d3")  # one more than listed: dropped
        client.zadd(base + "sx", {"old": 2_000})
        for key in ("s:old", "sd:old", "sx"):
            client.pexpire(base + key, 600_000)
        light = await store.session("acme", "old", decisions=False)
        whole = await store.session("acme", "old")
        (listed,) = await store.sessions(("acme",), "last_seen", 10)
        assert whole is not None and light is not None
        assert whole == listed
        assert light == whole._replace(decision_ids=())
        assert (whole.first_seen_us, whole.last_seen_us, whole.turns) == (1_000_000, 2_000_000, 3)
        assert (whole.input_tokens, whole.cached_tokens, whole.output_tokens, whole.cost_micros) == (
            300,
            120,
            30,
            1500,
        )
        assert (whole.first_input, whole.last_input, whole.last_growth) == (90, 110, 10)
        assert (whole.model, whole.upstream, whole.replica, whole.workflow) == ("chat", "local", 1, "triage")
        assert (whole.decision_ids, whole.decisions_dropped) == (("d2", "d3"), 5)
        assert (whole.due, whole.due_turn) == ("every_turns 3", 3)

        await store.update_session(update("old", input_tokens=150, decision_ids=("d4",), max_decisions=2))
        after = await store.session("acme", "old")
        assert after is not None
        assert (after.turns, after.input_tokens, after.cost_micros) == (4, 450, 2000)
        assert (after.first_input, after.last_input, after.last_growth) == (90, 150, 40)
        assert (after.decision_ids, after.decisions_dropped) == (("d3", "d4"), 6)
        assert (after.due, after.due_turn) == ("every_turns 3", 3)
        assert client.type(base + "sr:old") == b"string"
        client.hset(base + "s:old", mapping={"t": 99, "i": 9999})  # an earlier version's replica
        for read in (store.session("acme", "old"), store.session("acme", "old", decisions=False)):
            again = await read
            assert again is not None
            assert (again.turns, again.input_tokens) == (4, 450)
    finally:
        client.close()
        await store.aclose()
