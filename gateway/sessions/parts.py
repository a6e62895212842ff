"""Sessions' parts, for the composition root: what lives as long as the process (the store
and its cache, the recorder, the summarizer) and the stages a config gives (rebuilt with the
rest of the request's stages when the config is edited)."""

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
class SessionStages:
    open: SessionOpen  # after admit and label
    check: SessionCheck  # after the request-side policy stages, before route


@dataclass(frozen=True, slots=True)
class SessionParts:
    store: SessionStore
    recorder: SessionRecorder  # the finisher after settle
    summarizer: Summarizer  # given its pipeline by each assembly of the stages
    metered: bool  # on metering's store: caps are reserved, records ride on its settle

    def stages(self, config: GatewayConfig) -> SessionStages:
        return SessionStages(
            SessionOpen(self.store),
            SessionCheck(
                SessionSettings(config), self.store, self.summarizer, scrubber_for(config), self.metered
            ),
        )

    def views(
        self,
        authenticate: Callable[[str | None], Principal],
        authorize_operator: Callable[[str | None], object] | None,
        tenants: Sequence[str],
    ) -> SessionViews:
        return SessionViews(self.store, authenticate, authorize_operator, tenants)


def session_parts(
    config: GatewayConfig,
    open_store: Callable[[], StateStore],
    metered: bool,
    upstream_ids: Callable[[str], str],
) -> SessionParts:
    """`open_store`: metering's store when `metered`, else the embedded one (opened on first use)."""
    store = SessionStore(open_store, config.sessions.cache_s)
    return SessionParts(
        store=store,
        recorder=SessionRecorder(store, SessionSettings(config), PriceBook.from_config(config.prices)),
        summarizer=Summarizer(upstream_ids),
        metered=metered,
    )


def bind_summaries(parts: SessionParts | None, summary_pipeline: Pipeline) -> None:
    if parts is not None:
        parts.summarizer.bind(summary_pipeline)


def trace_summaries(parts: SessionParts | None, tracer: Tracer) -> None:
    if parts is not None:
        parts.summarizer.trace_with(tracer)


async def close_sessions(parts: SessionParts | None) -> None:
    if parts is not None:
        await parts.store.aclose(owned=not parts.metered)  # metering's store is metering's to close
