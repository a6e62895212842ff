"""Context windows: a candidate whose model cannot hold the request (its typical input
tokens plus the output it may produce) is skipped, so a longer-window candidate serves it;
when none can, 400 context_length_exceeded with the numbers, before any upstream is called.

Windows come from `context_windows` in the config (upstream model id -> tokens) over the
built-in ones; a model with no known window is never skipped (its server has the last word).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.exchange import Endpoint, Exchange
from gateway.metering.estimate import requested_output
from gateway.sessions.refusals import no_window_fits
from gateway.sessions.tokens import typical_input_tokens

BUILT_IN_WINDOWS: Mapping[str, int] = {
    "@cf/moonshotai/kimi-k2.6": 262_144,
    "@cf/moonshotai/kimi-k2.7-code": 262_144,
}


class ContextWindows:
    name = "context_windows"

    def __init__(self, windows: Mapping[str, int]) -> None:
        self.windows = {**BUILT_IN_WINDOWS, **windows}

    async def __call__(self, exchange: Exchange) -> None:
        candidates = exchange.candidates
        if exchange.endpoint is not Endpoint.CHAT or not any(c.model in self.windows for c in candidates):
            return
        tokens = typical_input_tokens(exchange.body)
        output = requested_output(exchange.body) or 0
        fitting = [c for c in candidates if tokens + output <= self.windows.get(c.model, tokens + output)]
        if not fitting:
            raise no_window_fits(tokens, output, {c.model: self.windows[c.model] for c in candidates})
        if len(fitting) < len(candidates):
            exchange.candidates = fitting


def context_windows(windows: Mapping[str, int], models: Iterable[str]) -> list[ContextWindows]:
    """The stage, when some model the config routes to has a known window; else none."""
    stage = ContextWindows(windows)
    return [stage] if any(model in stage.windows for model in models) else []
