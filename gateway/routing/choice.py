"""Spill by live signal: an alias's candidates ordered by the least latency seen lately or
by the lowest price, rather than as configured, keeping each session on its home.

`least_latency` orders by each candidate's recent time to first token (an exponentially
weighted mean, per worker, fed by the `LatencyBoard` finisher); a candidate not yet
measured comes first, so it gets measured. `least_cost` orders by price (input plus output
per million tokens; a model without a price last). A session that already has a home (the
candidate it was first given, remembered in a bounded table) keeps it while that candidate
is allowed: moving it would cost its prefix cache more than the signal gains.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

from gateway.exchange import Candidate, Exchange
from gateway.metering.prices import PriceBook

Mode = Literal["least_latency", "least_cost"]
HOMES_MAX = 50_000  # sessions remembered per alias and worker; the least recently seen go first
_ALPHA = 0.2  # weight of the newest measurement in the latency mean


class LatencyBoard:
    """Recent time to first token per candidate (`Candidate.arm`), in this worker."""

    name = "latency_board"

    def __init__(self) -> None:
        self._mean: dict[str, float] = {}

    def of(self, arm: str) -> float:
        return self._mean.get(arm, 0.0)

    def observe(self, arm: str, seconds: float) -> None:
        mean = self._mean.get(arm)
        self._mean[arm] = seconds if mean is None else mean + _ALPHA * (seconds - mean)

    async def finish(self, exchange: Exchange) -> None:
        """A finisher: the served attempt's time to its first byte."""
        served = next((a for a in reversed(exchange.attempts) if a.error is None and a.ended_at), None)
        if served is None or exchange.first_byte_at is None:
            return
        self.observe(f"{served.upstream}/{served.model}", exchange.first_byte_at - served.started_at)


class LiveChoice:
    def __init__(
        self, mode: Mode, board: LatencyBoard, prices: PriceBook, homes_max: int = HOMES_MAX
    ) -> None:
        self._mode = mode
        self._board = board
        self._prices = prices
        self._homes: OrderedDict[str, Candidate] = OrderedDict()
        self._homes_max = homes_max

    @property
    def homes(self) -> int:
        """Sessions with a home remembered."""
        return len(self._homes)

    def ordered(self, session_key: str | None, candidates: Sequence[Candidate]) -> list[Candidate]:
        home = self._homes.get(session_key) if session_key is not None else None
        if home is not None and home in candidates:
            self._homes.move_to_end(session_key)  # type: ignore[arg-type]
            return [home, *(c for c in candidates if c != home)]
        ranked = sorted(candidates, key=self._signal)  # stable: ties keep the configured order
        if session_key is not None and ranked:
            self._homes[session_key] = ranked[0]
            if len(self._homes) > self._homes_max:
                self._homes.popitem(last=False)
        return ranked

    def _signal(self, candidate: Candidate) -> float:
        if self._mode == "least_latency":
            return self._board.of(candidate.arm)
        price = self._prices.get(candidate.model)
        return math.inf if price is None else float(price.input + price.output)
