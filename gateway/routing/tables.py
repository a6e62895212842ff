"""What routing reads from config: each alias's answering candidates, its mirrors, and the
live-signal choices, built once at start."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import GatewayConfig
from gateway.exchange import Candidate
from gateway.metering.prices import PriceBook
from gateway.ports import AuditSink, StateStore
from gateway.routing.choice import LatencyBoard, LiveChoice
from gateway.routing.mirror import Mirror, Shadow, ShadowTarget
from gateway.routing.upstream_route import UpstreamRoute


def candidates_from(config: GatewayConfig) -> dict[str, list[Candidate]]:
    """Alias -> the candidates that may answer (mirrors are never among them)."""
    return {
        alias: [Candidate(c.upstream, c.model, c.class_, c.weight) for c in candidates if c.mirror is None]
        for alias, candidates in config.models.items()
    }


def mirrors_from(config: GatewayConfig) -> dict[str, list[tuple[Candidate, float]]]:
    """Alias -> its shadow candidates and the percent of requests each gets a copy of."""
    found: dict[str, list[tuple[Candidate, float]]] = {}
    for alias, candidates in config.models.items():
        for c in candidates:
            if c.mirror is not None:
                found.setdefault(alias, []).append((Candidate(c.upstream, c.model, c.class_), c.mirror))
    return found


def live_choices(config: GatewayConfig, board: LatencyBoard, prices: PriceBook) -> dict[str, LiveChoice]:
    return {
        alias: LiveChoice(mode, board, prices)
        for alias, mode in config.routing.choose.items()
        if mode != "ordered"
    }


def mirror_from(
    config: GatewayConfig,
    routes: Mapping[str, UpstreamRoute],
    audit: AuditSink | None,
    store: StateStore | None,
) -> Mirror | None:
    """The side-by-side recorder and mirror sender; None when no alias is run side by side."""
    mirrors = mirrors_from(config)
    splits = {
        alias
        for alias, candidates in config.models.items()
        if sum(1 for c in candidates if c.weight is not None) > 1
    }
    if not mirrors and not splits:
        return None
    settings = config.routing.mirror
    return Mirror(
        {alias: [Shadow(c, percent) for c, percent in found] for alias, found in mirrors.items()},
        frozenset(splits | set(mirrors)),
        {name: ShadowTarget(route.upstream, route.pool) for name, route in routes.items()},
        PriceBook.from_config(config.prices),
        max_in_flight=settings.max_in_flight,
        timeout_s=settings.timeout_s,
        ledger=store if settings.meter else None,
        keep_s=config.state.settled_keep_s if config.state is not None else 900,
        audit=audit,
    )
