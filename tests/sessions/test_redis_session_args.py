"""The Redis session scripts' argument: a batch's updates, folded per session, as one
MessagePack array the script unpacks."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from adapters.state.redis_sessions import _Fold, encoded, folded
from gateway.sessions.records import Checkpoint, SessionUpdate

_TEXT = st.sampled_from(["", "chat", "triage", "every_turns 8"])
_CHECKPOINTS = st.none() | st.builds(
    Checkpoint,
    st.integers(1, 99),
    st.integers(1, 99),
    st.just("ab" * 32),
    st.text(max_size=20),
    st.integers(0, 10**6),
    st.integers(0, 10**4),
)
_UPDATES = st.builds(
    SessionUpdate,
    st.just("acme"),
    st.sampled_from(["s1", "s2", "s3"]),
    st.integers(0, 1),
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.integers(0, 10**6),
    st.integers(0, 10**9),
    _TEXT,
    _TEXT,
    st.integers(0, 3),
    _TEXT,
    st.lists(st.uuids().map(lambda u: u.hex), max_size=3).map(tuple),
    st.integers(0, 64),
    st.integers(0, 86_400),
    _TEXT,
    _CHECKPOINTS,
    st.integers(0, 8),
)


@given(st.lists(_UPDATES, max_size=8))
def test_the_scripts_argument_is_the_batchs_folds_as_msgpack(updates: list[SessionUpdate]) -> None:
    assert msgpack.unpackb(encoded(updates)) == folded(updates)


@given(_UPDATES)
def test_a_sessions_only_turn_in_a_batch_gives_what_folding_it_would(update: SessionUpdate) -> None:
    fold = _Fold(update)
    fold.add(update)
    assert folded([update]) == [fold.args()]
