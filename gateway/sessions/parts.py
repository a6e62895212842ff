"""Sessions' parts, built from config around the store they use, for the composition root."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.exchange import Principal
from gateway.metering.prices import PriceBook
from gateway.pipeline import Pipeline
from gateway.ports import StateStore
from gateway.redaction.settings import scrubber_for
from gateway.sessions.settings import SessionSettings
from gateway.sessions.stages import SessionCheck, SessionOpen
from gateway.sessions.store_access import SessionStore
from gateway.sessions.summarizer import Summarizer
from gateway.sessions.update import SessionRecorder
from gateway.sessions.views import SessionViews
from gateway.tracing import Tracer


@dataclass(frozen=True, slots=True)
class SessionParts:
    store: SessionStore
    open: SessionOpen  # the stage after admit
    check: SessionCheck  # the stage before meter
    recorder: SessionRecorder  # the finisher after settle
    summarizer: Summarizer  # bound to its pipeline once that is built
    owns_store: bool  # the embedded store opened for sessions alone (metering's is metering's)

    def views(
        self,
        authenticate: Callable[[str | None], Principal],
        authorize_operator: Callable[[str | None], None] | None,
        tenants: Sequence[str],
    ) -> SessionViews:
        return SessionViews(self.store, authenticate, authorize_operator, tenants)

    async def aclose(self) -> None:
        await self.store.aclose(owned=self.owns_store)


def bind_summaries(parts: SessionParts | None, summary_pipeline: Pipeline, tracer: Tracer) -> None:
    if parts is not None:
        parts.summarizer.bind(summary_pipeline, tracer)


def session_parts(
    config: GatewayConfig,
    open_store: Callable[[], StateStore],
    metered: bool,
    upstream_ids: Callable[[str], str],
) -> SessionParts:
    """`open_store`: metering's store when `metered`, else the embedded one (opened on first use)."""
    settings = SessionSettings(config)
    store = SessionStore(open_store, config.sessions.cache_s)
    summarizer = Summarizer(upstream_ids)
    return SessionParts(
        store=store,
        open=SessionOpen(store),
        check=SessionCheck(settings, store, summarizer, scrubber_for(config), metered=metered),
        recorder=SessionRecorder(store, settings, PriceBook.from_config(config.prices)),
        summarizer=summarizer,
        owns_store=not metered,
    )
