"""What a finished request adds to its session record (`SessionUpdate`), and the finisher
that records it when no settle carries it (metering off: the embedded store, one write)."""

from __future__ import annotations

import logging

from gateway.errors import StateStoreUnavailable
from gateway.exchange import Exchange
from gateway.metering.counted import settle_usage
from gateway.metering.prices import PriceBook
from gateway.sessions.records import SessionUpdate
from gateway.sessions.settings import SessionSettings
from gateway.sessions.store_access import SessionStore

logger = logging.getLogger("tollgate.sessions")


def session_update(
    exchange: Exchange, settings: SessionSettings, prompt: int, cached: int, completion: int, cost: int
) -> SessionUpdate | None:
    """The update for this request's session (None when it names none); the counts are what
    the request settled (zero when nothing was served)."""
    ticket, principal = exchange.session, exchange.principal
    if ticket is None or principal is None:
        return None
    served = next((a for a in reversed(exchange.attempts) if a.status == 200), None)
    return SessionUpdate(
        tenant=principal.tenant.name,
        session=ticket.key,
        turn=1 if served is not None else 0,
        input_tokens=prompt,
        cached_tokens=cached,
        output_tokens=completion,
        cost_micros=cost,
        model=exchange.model_alias if served is not None else "",
        upstream=served.upstream if served is not None else "",
        replica=served.replica if served is not None else 0,
        workflow=ticket.workflow,
        decision_ids=((str(exchange.decision_id),) if exchange.decision_id else ())
        + tuple(ticket.summary_decisions),
        max_decisions=settings.max_decisions,
        idle_s=settings.idle_s,
        due=ticket.due,
        checkpoint=ticket.checkpoint,
        max_checkpoints=settings.max_checkpoints,
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
        update = session_update(exchange, self._settings, prompt, cached, completion, cost)
        if update is None:
            return
        try:
            await (await self._sessions.store()).update_session(update)
        except StateStoreUnavailable:
            logger.warning(
                "session record not updated: the state store is unavailable",
                extra={"request_id": exchange.request_id},
            )
