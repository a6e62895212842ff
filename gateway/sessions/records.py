"""What the core and a state store exchange about sessions (the `StateStore` port).

A session is named by its key: the client's `x-session-affinity` / `x-session-id`, scoped to
its tenant and hashed (gateway/stages/admit.py); the raw id is never stored. Money is integer
micro-dollars, times are the store's clock in unix microseconds, as for budgets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A summary that stands for the first `messages` messages of the conversation.

    `digest` is the SHA-256 of exactly those messages (canonical JSON), so the summary is put
    in their place only in a request that re-sends the very same prefix. `summary` is stored
    redacted, as everything persisted is.
    """

    turn: int  # the session's turn at which it was made
    messages: int  # how many leading messages it replaces
    digest: str
    summary: str
    tokens_before: int  # estimated tokens of the messages it replaces
    tokens_after: int  # estimated tokens of the summary


@dataclass(slots=True, init=False)
class SessionUpdate:
    """What one request adds to its session record, applied atomically by the store: on the
    settle that already happens (`Settlement.session`), or alone (`StateStore.update_session`).

    Not changed once made. Its `__init__` is written out: one is made for every session
    request, and the one a dataclass generates (or a named tuple's `__new__`) runs as
    interpreted Python even when this module is compiled (docs/architecture.md, Compiled
    request path)."""

    tenant: str
    session: str  # the session key (hashed, tenant-scoped)
    turn: int  # 1 when an upstream served the request, else 0
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost_micros: int
    model: str  # the client's model alias ("" when nothing was served)
    upstream: str
    replica: int
    workflow: str  # "" keeps the one recorded
    # The policy decisions taken for it, in order: the request's own (none when no policy
    # decided), then its checkpoint summary's, which is a request of its own.
    decision_ids: tuple[str, ...]
    max_decisions: int  # the record keeps this many decision ids, newest last, and counts the rest
    idle_s: int  # the record expires this long after its last update
    due: str  # why a checkpoint is due now ("" when none is)
    checkpoint: Checkpoint | None  # a checkpoint made by this request, appended
    max_checkpoints: int  # older checkpoints are dropped past this many

    def __init__(
        self,
        tenant: str,
        session: str,
        turn: int,
        input_tokens: int,
        cached_tokens: int,
        output_tokens: int,
        cost_micros: int,
        model: str,
        upstream: str,
        replica: int,
        workflow: str,
        decision_ids: tuple[str, ...],
        max_decisions: int,
        idle_s: int,
        due: str = "",
        checkpoint: Checkpoint | None = None,
        max_checkpoints: int = 8,
    ) -> None:
        self.tenant = tenant
        self.session = session
        self.turn = turn
        self.input_tokens = input_tokens
        self.cached_tokens = cached_tokens
        self.output_tokens = output_tokens
        self.cost_micros = cost_micros
        self.model = model
        self.upstream = upstream
        self.replica = replica
        self.workflow = workflow
        self.decision_ids = decision_ids
        self.max_decisions = max_decisions
        self.idle_s = idle_s
        self.due = due
        self.checkpoint = checkpoint
        self.max_checkpoints = max_checkpoints


class SessionRecord(NamedTuple):
    """A session's record as a store read it (a named tuple: made for every read, at
    admission, where a frozen dataclass's construction cost eight times as much)."""

    tenant: str
    session: str
    first_seen_us: int
    last_seen_us: int
    turns: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost_micros: int
    first_input: int  # input tokens of the first turn
    last_input: int  # input tokens of the last turn
    last_growth: int  # last_input minus the turn before's
    model: str
    upstream: str
    replica: int
    workflow: str
    decision_ids: tuple[str, ...]  # newest last; at most the configured number
    decisions_dropped: int  # older decision ids no longer listed here (still in the decision log)
    due: str  # why the last checkpoint was due ("" never)
    due_turn: int
    checkpoints: tuple[Checkpoint, ...]  # oldest first

    @property
    def growth_slope(self) -> float:
        """Average input-token growth per turn, first turn to last."""
        return (self.last_input - self.first_input) / (self.turns - 1) if self.turns > 1 else 0.0

    @property
    def cache_hit_ratio(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


SESSION_SORTS = ("tokens", "spend", "last_seen")
