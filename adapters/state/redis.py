"""The state store for many replicas: Redis (or Redis Cluster), one atomic Lua script per
operation (`redis_scripts.py`), sent on one auto-pipelined connection (`redis_wire.py`), or
on one per cluster node (`redis_cluster.py`, with `state.redis_cluster: true`).

Keys are `<prefix>:{<tenant>}:...`: the hash tag keeps each tenant's keys in one cluster
slot, so every script's keys are co-located. The connection reopens by itself: a failed
command raises StateStoreUnavailable, and the next one opens a fresh connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from datetime import date, timedelta
from typing import Any

from adapters.state import redis_lease, redis_scripts, redis_sessions
from adapters.state.redis_cluster import open_wire
from adapters.state.redis_wire import ReplyError, Script, unavailable
from gateway.errors import StateStoreUnavailable
from gateway.metering.lease_records import LeaseGrant, LeaseSync
from gateway.metering.records import (
    IdempotencyClaim,
    RateState,
    ReserveOutcome,
    ReserveRequest,
    Settlement,
    SpendRow,
    StoredResponse,
)
from gateway.sessions.records import SessionRecord, SessionUpdate

_SAFE_TAG = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_MAX_BASES = 10_000  # tenants' key bases kept (tenants are configured, so far fewer)
_LISTED_PER_TENANT = 1000  # sessions of a tenant ranked for the operators' listing: those seen last
_SORT_KEYS = {
    "tokens": lambda r: (r.input_tokens + r.output_tokens, r.session),
    "spend": lambda r: (r.cost_micros, r.session),
    "last_seen": lambda r: (r.last_seen_us, r.session),
}
_LEDGER_FIELDS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")


class RedisStore:
    name = "redis"

    def __init__(
        self, url: str, prefix: str = "tollgate", timeout_s: float = 1.0, cluster: bool = False
    ) -> None:
        self._wire = open_wire(url, timeout_s, cluster)
        self._prefix = prefix
        self._bases: dict[str, str] = {}
        self._reserve = Script(redis_scripts.RESERVE)
        self._settle = Script(redis_scripts.SETTLE)
        self._counters = Script(redis_scripts.COUNTERS)
        self._open = Script(redis_scripts.OPEN_RESERVATIONS)
        self._claim = Script(redis_scripts.CLAIM_IDEMPOTENCY)
        self._complete = Script(redis_scripts.COMPLETE_IDEMPOTENCY)
        self._release = Script(redis_scripts.RELEASE_IDEMPOTENCY)
        self._lease = Script(redis_lease.LEASE)
        prelude = redis_scripts.PRELUDE
        self._settle_session = Script(redis_sessions.settle_with_session(redis_scripts.SETTLE, prelude))
        self._update_session = Script(redis_sessions.update_script(prelude))
        self._get_session = Script(redis_sessions.GET)
        self._list_sessions = Script(redis_sessions.LIST)

    def _base(self, tenant: str) -> str:
        """The tenant's key base, worked out once (a pattern match on every call was a
        microsecond and a half of each session read)."""
        base = self._bases.get(tenant)
        if base is None:
            if len(self._bases) >= _MAX_BASES:
                self._bases.clear()
            safe = _SAFE_TAG.match(tenant)
            tag = tenant if safe else "h" + hashlib.sha256(tenant.encode()).hexdigest()[:24]
            base = self._bases[tenant] = f"{self._prefix}:{{{tag}}}:"
        return base

    async def reserve(self, request: ReserveRequest) -> ReserveOutcome:
        base = self._base(request.tenant)
        keys = (
            base + "leases",
            base + "r:" + request.reservation_id,
            *(base + "q:" + rate.counter for rate in request.rates),
            *(base + "c:" + budget.counter for budget in request.budgets),
        )
        args: list[str | int] = [
            len(request.rates),
            len(request.budgets),
            round(request.lease_s * 1_000_000),
            base + "r:",
            request.reservation_id,
        ]
        for rate in request.rates:
            args += (rate.increment_us, rate.per_minute)
        for budget in request.budgets:
            args += (budget.amount, budget.limit, 1 if budget.hard else 0, budget.expires_at)
        reply = await self._wire.script(self._reserve, keys, tuple(args))
        nb = len(request.budgets)
        used = tuple(int(v) for v in reply[1 : 1 + nb])
        rates = []
        for index, rate in enumerate(request.rates):
            remaining, backlog_us, retry_us = reply[1 + nb + 3 * index : 4 + nb + 3 * index]
            rates.append(
                RateState(rate.per_minute, int(remaining), int(backlog_us) / 1e6, int(retry_us) / 1e6)
            )
        return ReserveOutcome(reply[0] == 1, used, tuple(rates))

    async def settle(self, settlement: Settlement) -> bool:
        base = self._base(settlement.tenant)
        entry = settlement.ledger
        keys = [
            base + "leases",
            base + "r:" + settlement.reservation_id,
            *(base + "c:" + counter for counter, _, _ in settlement.spent),
            *(base + "q:" + refund.counter for refund in settlement.refunds),
        ]
        args: list[str | int | bytes] = [
            len(settlement.spent),
            len(settlement.refunds),
            settlement.keep_s * 1000,
            settlement.reservation_id,
            f"{entry.key_id}\t{entry.model}\t{entry.workflow}\t" if entry else "",
        ]
        for _, amount, expires_at in settlement.spent:
            args += (amount, expires_at)
        args += [refund.increment_us for refund in settlement.refunds]
        if entry is not None:
            keys.append(base + "l:" + entry.day)
            args += (entry.requests, entry.prompt_tokens, entry.cached_tokens)
            args += (entry.completion_tokens, entry.cost_micros)
        args.append(1 if settlement.release else 0)  # last, wherever the rest ends
        script = self._settle
        if settlement.session is not None:  # taken off again before the settle's own body runs
            script = self._settle_session
            keys.append(base + "sx")
            args += (base, redis_sessions.encoded((settlement.session,)))
        return bool(await self._wire.script(script, tuple(keys), tuple(args)) == 1)

    async def session(self, tenant: str, session: str, decisions: bool = True) -> SessionRecord | None:
        keys = redis_sessions.keys(self._base(tenant), session)
        if not decisions:  # admission's read: plain commands, no reply through Lua
            packed = await self._wire.call("GET", keys[0])
            if isinstance(packed, bytes):  # the common case, one command
                values = redis_sessions.unpacked(packed)
                checkpoints: list[bytes] = []
                if redis_sessions.holds_checkpoints(values):
                    held = await self._wire.call("LRANGE", keys[2], 0, -1)
                    checkpoints = _checked(self._wire.describe, held)
                return redis_sessions.packed_record(tenant, session, values, checkpoints)
            # No packed record: none at all, or an earlier version's hash of it
            reply = await self._wire.transaction(keys[0], redis_sessions.light_read(keys))
            if not isinstance(reply, ReplyError):
                return redis_sessions.light_record(tenant, session, reply)
            # a cluster's slot moved or migrating: the script follows the redirections
        listed = (1 if decisions else 0,)
        reply = _checked(self._wire.describe, await self._wire.script(self._get_session, keys, listed))
        return redis_sessions.record(tenant, session, *reply) if reply else None

    async def sessions(self, tenants: tuple[str, ...], sort: str, limit: int) -> list[SessionRecord]:
        found: list[SessionRecord] = []
        for tenant in tenants:
            base = self._base(tenant)
            reply = await self._wire.script(self._list_sessions, (base + "sx",), (base, _LISTED_PER_TENANT))
            found += redis_sessions.listed(tenant, _checked(self._wire.describe, reply))
        found.sort(key=_SORT_KEYS[sort], reverse=True)
        return found[:limit]

    async def update_session(self, update: SessionUpdate) -> None:
        base = self._base(update.tenant)
        update_args = (base, redis_sessions.encoded((update,)))
        await self._wire.script(self._update_session, (base + "sx",), update_args)

    async def lease(self, sync: LeaseSync) -> LeaseGrant:
        keys, args = redis_lease.lease_call(self._base(sync.tenant), sync)
        return redis_lease.lease_grant(sync, await self._wire.script(self._lease, keys, args))

    async def counters(self, tenant: str, counters: tuple[str, ...]) -> tuple[int, ...]:
        base = self._base(tenant)
        keys = (base + "leases", *(base + "c:" + counter for counter in counters))
        reply = await self._wire.script(self._counters, keys, (base + "r:",))
        return tuple(int(v) for v in reply)

    async def open_reservations(self, tenant: str) -> int:
        base = self._base(tenant)
        return int(await self._wire.script(self._open, (base + "leases",), (base + "r:",)))

    async def claim_idempotency(
        self, tenant: str, key: str, fingerprint: str, lease_s: float
    ) -> IdempotencyClaim:
        reply = await self._wire.script(
            self._claim, (self._base(tenant) + "i:" + key,), (fingerprint, max(1, round(lease_s * 1000)))
        )
        state = reply[0].decode()
        if state == "done":
            return IdempotencyClaim("done", StoredResponse(int(reply[1]), bytes(reply[2])))
        return IdempotencyClaim(state)

    async def complete_idempotency(
        self, tenant: str, key: str, fingerprint: str, response: StoredResponse, ttl_s: float
    ) -> None:
        args = (fingerprint, response.status, response.body, max(1, round(ttl_s * 1000)))
        await self._wire.script(self._complete, (self._base(tenant) + "i:" + key,), args)

    async def release_idempotency(self, tenant: str, key: str) -> None:
        await self._wire.script(self._release, (self._base(tenant) + "i:" + key,), ())

    async def spend(self, tenants: tuple[str, ...], since: str, until: str) -> list[SpendRow]:
        days = _days(since, until)
        rows: list[SpendRow] = []
        # One pipeline: every HGETALL is written in the same turn.
        keys = [self._base(tenant) + "l:" + day for tenant in tenants for day in days]
        replies = await asyncio.gather(*(self._wire.call("HGETALL", key) for key in keys))
        index = 0
        for tenant in tenants:
            for day in days:
                reply = _checked(self._wire.describe, replies[index])
                rows.extend(_ledger_rows(tenant, day, dict(zip(reply[::2], reply[1::2], strict=True))))
                index += 1
        return rows

    async def ping(self) -> None:
        _checked(self._wire.describe, await self._wire.call("PING"))

    async def durability_problem(self) -> str | None:
        """Why a restart of this Redis would lose budgets (no append-only file), or None when
        it would not, or when that cannot be told (the server unreachable, or INFO refused, as
        some managed services do). `INFO persistence` rather than CONFIG GET, which managed
        services often disable."""
        try:
            reply = await self._wire.call("INFO", "persistence")
        except StateStoreUnavailable:
            return None
        if not isinstance(reply, bytes):  # an error reply: INFO renamed or refused
            return None
        fields = dict(line.split(":", 1) for line in reply.decode().splitlines() if ":" in line)
        if fields.get("aof_enabled", "").strip() != "0":
            return None
        return (
            f"the state store (Redis at {self._wire.describe}) has no append-only file (appendonly no): "
            "a restart of Redis loses every budget's spend, open reservation and rate limit since its "
            "last snapshot, if any. Run it with `appendonly yes` and `appendfsync everysec`."
        )

    async def aclose(self) -> None:
        await self._wire.aclose()


def _checked(describe: str, reply: Any) -> Any:
    if isinstance(reply, ReplyError):
        raise unavailable(describe, reply)
    return reply


def _days(since: str, until: str) -> list[str]:
    first, last = date.fromisoformat(since), date.fromisoformat(until)
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def _ledger_rows(tenant: str, day: str, fields: dict[bytes, bytes]) -> list[SpendRow]:
    grouped: dict[tuple[str, str, str], dict[str, int]] = {}
    for field, value in fields.items():
        parts = field.decode().split("\t")
        # key, model, workflow, figure; rows written before the ledger kept workflows lack it
        key_id, model, workflow, name = (
            parts if len(parts) == 4 else (parts[0], parts[1], "default", parts[2])
        )
        grouped.setdefault((key_id, model, workflow), {})[name] = int(value)
    return [
        SpendRow(tenant, day, key_id, model, *_figures(values), workflow=workflow)
        for (key_id, model, workflow), values in sorted(grouped.items())
    ]


def _figures(values: dict[str, int]) -> tuple[int, int, int, int, int]:
    requests, prompt, cached, completion, cost = (values.get(name, 0) for name in _LEDGER_FIELDS)
    return requests, prompt, cached, completion, cost
