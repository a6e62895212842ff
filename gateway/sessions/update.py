"""What a finished request adds to its session record (`SessionUpdate`), and the finisher
that records it when no settle carries it (metering off: the embedded store, one write)."""

from __future__ import annotations

import logging

from gateway.errors import StateStoreUnavailable
from gateway.exchange import Attempt, Exchange
from gateway.metering.counted import settle_usage
from gateway.metering.prices import PriceBook
from gateway.sessions.records import SessionUpdate
from gateway.sessions.settings import SessionSettings
from gateway.sessions.store_access import SessionStore

logger = logging.getLogger("tollgate.sessions")


def session_update(
    exchange: Exchange,
    settings: SessionSettings,
    prompt: int,
    cached: int,
    completion: int,
    cost: int,
    served: Attempt | None,
) -> SessionUpdate | None:
    """The update for this request's session (None when it names none); the counts are what
    the request settled (zero when nothing was served), `served` the attempt that served it."""
    ticket, principal = exchange.session, exchange.principal
    if ticket is None or principal is None:
        return None
    decision_id = exchange.decision_id
    decisions: tuple[str, ...] = (str(decision_id),) if decision_id else ()
    if ticket.summary_decisions:
        decisions += ticket.summary_decisions
    if served is None:
        model = upstream = ""
        replica = 0
    else:
        model, upstream, replica = exchange.model_alias, served.upstream, served.replica
    return SessionUpdate(
        principal.tenant.name,
        ticket.key,
        0 if served is None else 1,
        prompt,
        cached,
        completion,
        cost,
        model,
        upstream,
        replica,
        ticket.workflow,
        decisions,
        settings.max_decisions,
        settings.idle_s,
        ticket.due,
        ticket.checkpoint,
        settings.max_checkpoints,
    )


class SessionRecorder:
    """The finisher that records a request in its session when no settle carried the update:
    metering off, or a request refused before its reservation (its decision id is kept)."""

    name = "session_record"

    def __init__(self, sessions: SessionStore, settings: SessionSettings, prices: PriceBook) -> None:
        self._sessions = sessions
        self._settings = settings
        self._prices = prices

    async def finish(self, exchange: Exchange) -> None:
        if exchange.session is None or exchange.session.recorded or exchange.principal is None:
            return
        served = next((a for a in reversed(exchange.attempts) if a.status == 200), None)
        usage = settle_usage(exchange)
        prompt, cached, completion = (
            (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) if served else (0, 0, 0)
        )
        price = self._prices.get(served.model) if served else None
        cost = price.cost_micros(prompt, cached, completion) if price else 0
        update = session_update(exchange, self._settings, prompt, cached, completion, cost, served)
        if update is None:
            return
        try:
            await (await self._sessions.store()).update_session(update)
        except StateStoreUnavailable:
            logger.warning(
                "session record not updated: the state store is unavailable",
                extra={"request_id": exchange.request_id},
            )
