"""Fault vocabulary (shared by ``x_sim.fault`` and ``FaultPlan``) and the server-level plan.

A fault is a dict, either an error status or a ``kind``:

- ``{"status": 429, "code": 3040, "message"?: str, "retry_after"?: seconds}``: answer with
  that status in the path's error format (Workers AI envelope with the numeric code on
  ``/client/v4`` paths, OpenAI error with the code as a string on ``/v1``), plus
  ``Retry-After`` when given.
- ``{"kind": "slow_first_token", "delay_s": x}``: sleep before the first byte (before headers).
- ``{"kind": "disconnect", "after_chunks": n}``: stream n SSE events then drop the connection
  (no ``[DONE]``); a non-streamed request gets the connection closed without a response.
- ``{"kind": "malformed_chunk", "after_chunks": n}``: emit ``data: {not json`` after n events,
  then carry on; a non-streamed request gets a 200 whose body is not JSON.
- ``{"kind": "hang"}``: never answer, until the client goes away or the simulator stops.

"Events" count every ``data:`` line, the first (role) chunk included.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

FaultKind = Literal["status", "slow_first_token", "disconnect", "malformed_chunk", "hang"]
_KINDS: frozenset[str] = frozenset({"slow_first_token", "disconnect", "malformed_chunk", "hang"})


@dataclass(frozen=True, slots=True)
class Fault:
    """A parsed fault; see the module docstring for the dict form."""

    kind: FaultKind
    status: int = 500
    code: int | None = None
    message: str | None = None
    retry_after: float | None = None
    delay_s: float = 0.0
    after_chunks: int = 0


def _number(raw: dict[str, Any], name: str, default: float) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"fault.{name} must be a non-negative number")
    return float(value)


def parse_fault(raw: object) -> Fault:
    """Validate a fault dict. Raises ``ValueError`` with a readable message."""
    if not isinstance(raw, dict):
        raise ValueError("fault must be an object")
    kind = raw.get("kind")
    if kind is not None:
        if kind not in _KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        return Fault(
            kind=kind,
            delay_s=_number(raw, "delay_s", 0.0),
            after_chunks=int(_number(raw, "after_chunks", 0)),
        )
    status = raw.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise ValueError("fault needs a 'kind' or an HTTP error 'status' (400-599)")
    code = raw.get("code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        raise ValueError("fault.code must be an integer")
    message = raw.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError("fault.message must be a string")
    retry_after = raw.get("retry_after")
    return Fault(
        kind="status",
        status=status,
        code=code,
        message=message,
        retry_after=None if retry_after is None else _number(raw, "retry_after", 0.0),
    )


class ReplicaSwitch(Protocol):
    """What the plan needs from the simulator to take a replica's listener down and up."""

    def set_replica_down(self, replica: int, down: bool) -> None: ...

    def down_replicas(self) -> list[int]: ...


@dataclass(slots=True)
class _Entry:
    fault: Fault
    remaining: int | None  # None = every request
    replica: int | None  # None = every replica
    every: int = 1  # applies to one request in this many (the every-th, counting from 1)
    first_attempts: bool = False  # only to a body's first request: a retry of it passes
    seen: set[bytes] = field(default_factory=set)  # digests of the bodies met (first_attempts)
    met: int = 0  # requests this entry counted towards `every`


class FaultPlan:
    """Server-level faults, for tests where the request itself cannot carry ``x_sim.fault``.

    Applies to inference requests (chat completions, embeddings, ``/ai/run``); a request's own
    ``x_sim.fault`` takes precedence and does not consume the plan. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        self._switch: ReplicaSwitch | None = None

    def attach(self, switch: ReplicaSwitch | None) -> None:
        """Called by the simulator once its replicas exist (None when it stops)."""
        self._switch = switch

    def set(
        self,
        fault: dict[str, Any],
        count: int | None = None,
        replica: int | None = None,
        every: int = 1,
        first_attempts: bool = False,
    ) -> None:
        """Apply ``fault`` to the next ``count`` requests (all when None), optionally on one
        replica; with ``every`` n, to one request in n only; with ``first_attempts``, only to
        the first request of each distinct body (so ``every=3, first_attempts=True`` fails a
        third of first attempts, and every retry gets through)."""
        parsed = parse_fault(fault)
        if count is not None and count <= 0:
            return
        if every < 1:
            raise ValueError("'every' must be at least 1")
        with self._lock:
            self._entries.append(_Entry(parsed, count, replica, every, first_attempts))

    def take(self, replica: int, body: Any = None) -> Fault | None:
        """The fault for the next request on ``replica`` (whose JSON body is ``body``),
        consuming one use of it."""
        if not self._entries:  # fast path, no lock: the common case in benchmarks
            return None
        with self._lock:
            for i, entry in enumerate(self._entries):
                if entry.replica is not None and entry.replica != replica:
                    continue
                if entry.first_attempts:
                    digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()
                    if digest in entry.seen:
                        continue
                    entry.seen.add(digest)
                if entry.every > 1:
                    entry.met += 1
                    if entry.met % entry.every:
                        continue
                if entry.remaining is not None:
                    entry.remaining -= 1
                    if entry.remaining == 0:
                        del self._entries[i]
                return entry.fault
        return None

    def down(self, replica: int) -> None:
        """Close the replica's listener (connection refused) and its open connections."""
        self._require_switch().set_replica_down(replica, True)

    def up(self, replica: int) -> None:
        """Listen again on the replica's port."""
        self._require_switch().set_replica_down(replica, False)

    def clear(self) -> None:
        """Drop every planned fault and bring every down replica back up."""
        with self._lock:
            self._entries.clear()
        if self._switch is not None:
            for replica in self._switch.down_replicas():
                self._switch.set_replica_down(replica, False)

    def _require_switch(self) -> ReplicaSwitch:
        if self._switch is None:
            raise RuntimeError("the simulator is not running")
        return self._switch
