"""A request's part in its session, carried on the Exchange (`exchange.session`)."""

from __future__ import annotations

from gateway.sessions.records import Checkpoint, SessionRecord
from gateway.sessions.rules import NO_LIMITS, SessionLimits


class SessionTicket:
    """Made for every request that names its session: a plain class whose constructor sets
    only what admission knows (a dataclass's sets all eleven fields), the rest read from the
    class until a stage sets it."""

    key: str  # the session key: the client's id, tenant-scoped and hashed
    workflow: str  # the x-workflow label ("" when none)
    record: SessionRecord | None  # as read at admission (at most `sessions.cache_s` old)
    bands: dict[str, str]  # the record's policy bands (`bands.py`), shared by the requests that read it
    limits: SessionLimits = NO_LIMITS  # set once the decision is known
    due: str = ""  # why a checkpoint is due with this request
    checkpoint: Checkpoint | None = None  # made by this request (compact mode)
    # Decision ids of this request's checkpoint summary (a request of its own, decided by the
    # policy too), for the record's decision list.
    summary_decisions: tuple[str, ...] = ()
    summary_failed: bool = False  # compact: the summarizer gave no summary (the turn went on uncompacted)
    compacted: int = 0  # leading messages this request had replaced by a summary
    recorded: bool = False  # the settle carries the record's update (else the recorder writes it)

    def __init__(self, key: str, workflow: str, record: SessionRecord | None, bands: dict[str, str]) -> None:
        self.key = key
        self.workflow = workflow
        self.record = record
        self.bands = bands
