"""What routing reads from config: each alias's answering candidates, its mirrors, and the
live-signal choices, built once at start."""

from __future__ import annotations

from gateway.config import GatewayConfig
from gateway.exchange import Candidate
from gateway.metering.prices import PriceBook
from gateway.routing.choice import LatencyBoard, LiveChoice


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
