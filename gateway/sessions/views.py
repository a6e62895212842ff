"""The session record as clients and operators see it: `GET /v1/sessions/{id}` (a tenant's
own sessions only: another tenant's answers the same 404 as one that does not exist, since
the id is looked up under the caller's tenant) and `GET /admin/sessions`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import orjson

from gateway.errors import InvalidRequest, NotFound
from gateway.exchange import Principal
from gateway.sessions.records import SESSION_SORTS, SessionRecord
from gateway.sessions.store_access import SessionStore
from gateway.stages.admit import scoped_session_key

_MAX_LIMIT = 1000
_MAX_ID_LENGTH = 512


def document(record: SessionRecord) -> dict[str, Any]:
    """A record as JSON: the session is named by its key (the id hashed), never the raw id."""
    return {
        "object": "session",
        "tenant": record.tenant,
        "session_key": record.session,
        "first_seen": _time(record.first_seen_us),
        "last_seen": _time(record.last_seen_us),
        "turns": record.turns,
        "usage": {
            "input_tokens": record.input_tokens,
            "cached_tokens": record.cached_tokens,
            "output_tokens": record.output_tokens,
        },
        "spend_usd": record.cost_micros / 1e6,
        "cache_hit_ratio": round(record.cache_hit_ratio, 4),
        "input_growth": {"per_turn": round(record.growth_slope, 1), "last": record.last_growth},
        "last": {
            "model": record.model or None,
            "upstream": record.upstream or None,
            "replica": record.replica,
        },
        "workflow": record.workflow or None,
        "decision_ids": list(record.decision_ids),
        "decisions_not_listed": record.decisions_dropped,
        "checkpoint_due": {"reason": record.due, "turn": record.due_turn} if record.due else None,
        "checkpoints": [
            {
                "turn": c.turn,
                "messages": c.messages,
                "prefix_sha256": c.digest,
                "tokens_before": c.tokens_before,
                "tokens_after": c.tokens_after,
                "summary": c.summary,
            }
            for c in record.checkpoints
        ],
    }


def _time(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SessionViews:
    def __init__(
        self,
        sessions: SessionStore,
        authenticate: Callable[[str | None], Principal],
        authorize_operator: Callable[[str | None], object] | None,
        tenants: Sequence[str],
    ) -> None:
        self._sessions = sessions
        self._authenticate = authenticate
        self._authorize_operator = authorize_operator
        self._tenants = tuple(tenants)

    async def one(self, authorization: str | None, session_id: str) -> bytes:
        """GET /v1/sessions/{id}, for the caller's tenant."""
        principal = self._authenticate(authorization)
        if not session_id or len(session_id) > _MAX_ID_LENGTH:
            raise _not_found()
        key = scoped_session_key(principal.tenant.name, session_id)
        store = await self._sessions.store()
        record = await store.session(principal.tenant.name, key)
        if record is None:
            raise _not_found()
        return orjson.dumps(document(record))

    async def listing(self, authorization: str | None, query: str) -> bytes:
        """GET /admin/sessions?tenant=&sort=tokens|spend|last_seen&limit="""
        if self._authorize_operator is None:
            raise NotFound(
                "Session listing is not enabled on this gateway: /admin/sessions needs an `admin:` block "
                "(operator token hashes).",
                code="admin_not_configured",
            )
        self._authorize_operator(authorization)
        tenants, sort, limit = listing_query(query, self._tenants)
        store = await self._sessions.store()
        records = await store.sessions(tenants, sort, limit)
        return orjson.dumps({"object": "list", "sort": sort, "data": [document(r) for r in records]})


def listing_query(query: str, known: Sequence[str]) -> tuple[tuple[str, ...], str, int]:
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"tenant", "sort", "limit"})
    if unknown:
        raise InvalidRequest(f"Unknown query parameter {unknown[0]!r}.", param=unknown[0])
    tenants = tuple(t for t in params.get("tenant", ()) if t) or tuple(known)
    for tenant in tenants:
        if tenant not in known:
            raise InvalidRequest(f"Unknown tenant {tenant!r}.", param="tenant", code="unknown_tenant")
    sort = params.get("sort", ["last_seen"])[-1]
    if sort not in SESSION_SORTS:
        raise InvalidRequest(
            f"sort must be one of {', '.join(SESSION_SORTS)}.", param="sort", code="invalid_value"
        )
    raw = params.get("limit", ["50"])[-1]
    if not raw.isdigit() or not 1 <= int(raw) <= _MAX_LIMIT:
        raise InvalidRequest(f"limit must be 1 to {_MAX_LIMIT}.", param="limit", code="invalid_value")
    return tenants, sort, int(raw)


def _not_found() -> NotFound:
    return NotFound("No such session.", code="session_not_found")
