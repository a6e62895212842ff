"""GET /admin/spend: the spend ledger for operators, behind credentials of their own
(`admin.tokens` in the config: SHA-256 hashes, as for API keys; a tenant's key never works).

Query: `tenant` (repeatable; default every tenant), `since` and `until` (YYYY-MM-DD, UTC;
default the current month up to today), `group_by` (workflow, model, key, tenant or day: one
entry per value, its figures summed; default every ledger row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime
from urllib.parse import parse_qs

import orjson

from gateway.admin_auth import AdminCredentials
from gateway.errors import InvalidRequest
from gateway.metering.plan import utc_now
from gateway.metering.report import default_range, parse_day, parse_group, spend_document
from gateway.ports import StateStore

_MAX_DAYS = 366


class SpendAdmin:
    def __init__(
        self,
        store: StateStore,
        token_hashes: Sequence[str],
        tenants: Sequence[str],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._store = store
        self._credentials = AdminCredentials(token_hashes)
        self._tenants = tuple(tenants)
        self._clock = clock

    def authorize(self, authorization: str | None) -> None:
        self._credentials.authorize(authorization)

    async def spend(self, authorization: str | None, query: str) -> bytes:
        self.authorize(authorization)
        params = parse_qs(query, keep_blank_values=True)
        unknown = sorted(set(params) - {"tenant", "since", "until", "group_by"})
        if unknown:
            raise InvalidRequest(f"Unknown query parameter {unknown[0]!r}.", param=unknown[0])
        tenants = tuple(params.get("tenant", ())) or self._tenants
        for tenant in tenants:
            if tenant not in self._tenants:
                raise InvalidRequest(f"Unknown tenant {tenant!r}.", param="tenant", code="unknown_tenant")
        since, until = default_range(self._clock().date())
        try:
            since = parse_day(params["since"][-1], "since") if "since" in params else since
            until = parse_day(params["until"][-1], "until") if "until" in params else until
            group_by = parse_group(params["group_by"][-1], "group_by") if "group_by" in params else None
        except ValueError as exc:
            raise InvalidRequest(str(exc), code="invalid_value") from None
        if since > until:
            raise InvalidRequest("since must not be after until.", param="since", code="invalid_value")
        if (date.fromisoformat(until) - date.fromisoformat(since)).days >= _MAX_DAYS:
            raise InvalidRequest(
                f"Ask for at most {_MAX_DAYS} days at a time.", param="since", code="invalid_value"
            )
        rows = await self._store.spend(tenants, since, until)
        return orjson.dumps(spend_document(rows, since, until, group_by))
