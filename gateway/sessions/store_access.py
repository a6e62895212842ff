"""Reading session records for admission: through a short per-worker cache, from the store
sessions use (metering's, else the embedded SQLite store opened on first use)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.errors import StateStoreUnavailable
from gateway.in_flight import InFlight
from gateway.ports import StateStore
from gateway.sessions.bands import NO_SESSION, session_bands
from gateway.sessions.records import Checkpoint, SessionRecord

logger = logging.getLogger("tollgate.sessions")

_MAX_ENTRIES = 10_000  # records cached per worker; the oldest entry goes first
_MAX_MADE = 4  # checkpoints this worker made, remembered per session until the record shows them

# A cache entry: until when it is fresh (monotonic), the record, and its policy bands.
_Entry = tuple[float, SessionRecord | None, dict[str, str]]


class SessionStore:
    """The store of session records, opened once, and a worker's cache of what it read.

    A record read is reused for `ttl_s` (`sessions.cache_s`): the policy's bands and the
    turn count of advise checkpoints may be that stale. It is read without its decision ids,
    which no stage uses (`GET /v1/sessions/{id}` reads the whole record from the store).
    Hard caps never use it: they are reserved in the store with the request's budgets.
    Checkpoints this worker made are kept beside the cache, since the settle that records
    them may land after the next turn arrives.
    """

    def __init__(
        self,
        open_store: Callable[[], StateStore],
        ttl_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_store = open_store
        self._store: StateStore | None = None
        self._opening = asyncio.Lock()
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._cache: dict[tuple[str, str], _Entry] = {}
        self._made: dict[tuple[str, str], list[Checkpoint]] = {}
        # Admission reads under way, made by the request that found the entry stale (no task:
        # a read is cheap, and made on most turns of an agent's session)
        self._reading: InFlight[tuple[str, str], _Entry] = InFlight(detached=False)

    async def store(self) -> StateStore:
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    self._store = self._open_store()
        return self._store

    def opened(self) -> StateStore | None:
        """The store, once something opened it (a scrape never opens the embedded file)."""
        return self._store

    async def record(self, tenant: str, session: str, fresh: bool = False) -> SessionRecord | None:
        """The record (None when there is none, or the store cannot be read: logged)."""
        return (await self._entry(tenant, session, fresh))[1]

    def cached(self, tenant: str, session: str) -> _Entry | None:
        """The cache's entry (record and policy bands) while it is fresh, else None: then
        `admission` reads the record. No coroutine for the common case."""
        cached = self._cache.get((tenant, session))
        if cached is not None and cached[0] > self._monotonic():
            return cached
        return None

    async def admission(self, tenant: str, session: str) -> tuple[SessionRecord | None, dict[str, str]]:
        """The cached record and its policy bands, computed once per read rather than per request.

        One read per session at a time: the requests of a session that find its entry stale
        while it is being read wait for that read (a session's entries all expire together
        under load, and each request reading for itself multiplied the reads by the requests
        in flight). Should the request making the read go away (cancelled), one of those
        waiting reads again."""
        (_, record, bands), _ = await self._reading.call(
            (tenant, session), lambda: self._entry(tenant, session, False)
        )
        return record, bands

    async def _entry(self, tenant: str, session: str, fresh: bool) -> _Entry:
        key = (tenant, session)
        now = self._monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now and not fresh:
            return cached
        try:
            store = self._store if self._store is not None else await self.store()
            record = await store.session(tenant, session, decisions=False)
        except StateStoreUnavailable:
            logger.warning("session record unavailable: the state store cannot be read")
            return cached if cached is not None else (now, None, NO_SESSION)
        if len(self._cache) >= _MAX_ENTRIES:
            del self._cache[next(iter(self._cache))]
        entry = self._cache[key] = (now + self._ttl_s, record, session_bands(record))
        return entry

    def checkpoints(self, tenant: str, session: str, record: SessionRecord | None) -> list[Checkpoint]:
        """The session's checkpoints: the record's, and those this worker made since."""
        known = list(record.checkpoints) if record is not None else []
        made = self._made.get((tenant, session))
        if made:
            digests = {c.digest for c in known}
            known += [c for c in made if c.digest not in digests]
        return known

    def made(self, tenant: str, session: str, checkpoint: Checkpoint) -> None:
        if len(self._made) >= _MAX_ENTRIES:
            del self._made[next(iter(self._made))]
        self._made[(tenant, session)] = [*self._made.get((tenant, session), []), checkpoint][-_MAX_MADE:]

    async def aclose(self, owned: bool) -> None:
        if owned and self._store is not None:
            await self._store.aclose()
