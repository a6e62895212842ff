"""Prices per upstream model, in integer micro-dollars per million tokens, and what a
request costs. $0.95 per million tokens is 950_000 micro-dollars per million tokens, i.e.
0.95 micro-dollars a token: costs are summed exactly, then rounded up to a micro-dollar.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.config import PriceConfig

PER_MILLION = 1_000_000
_WORST_CACHE_SIZE = 1024

DEFAULT_PRICES_USD: Mapping[str, tuple[float, float, float]] = {
    # (input, cached input, output) dollars per million tokens, from Cloudflare's model pages.
    "@cf/moonshotai/kimi-k2.6": (0.95, 0.16, 4.00),
    "@cf/moonshotai/kimi-k2.7-code": (0.95, 0.19, 4.00),
    # Deprecated on 2026-05-30; Cloudflare serves (and bills) requests for it as K2.6.
    "@cf/moonshotai/kimi-k2.5": (0.95, 0.16, 4.00),
}
"""Built-in prices; `prices:` in the config adds models and overrides these."""


@dataclass(frozen=True, slots=True)
class Price:
    """Micro-dollars per million tokens."""

    input: int
    cached_input: int
    output: int

    @classmethod
    def from_usd(cls, input_usd: float, cached_usd: float, output_usd: float) -> Price:
        return cls(_micros(input_usd), _micros(cached_usd), _micros(output_usd))

    def cost_micros(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> int:
        """Cached tokens are a subset of the prompt tokens, billed at the cached price."""
        cached = min(cached_tokens, prompt_tokens)
        total = (prompt_tokens - cached) * self.input + cached * self.cached_input
        return _ceil_div(total + completion_tokens * self.output, PER_MILLION)


class PriceBook:
    def __init__(self, prices: Mapping[str, Price]) -> None:
        self._prices = dict(prices)
        self._worst: dict[tuple[str, ...], Price | None] = {}  # per candidate list: few, from config

    @classmethod
    def from_config(cls, overrides: Mapping[str, PriceConfig]) -> PriceBook:
        prices = {model: Price.from_usd(*usd) for model, usd in DEFAULT_PRICES_USD.items()}
        for model, price in overrides.items():
            cached = price.input if price.cached_input is None else price.cached_input
            prices[model] = Price.from_usd(price.input, cached, price.output)
        return cls(prices)

    def get(self, model: str) -> Price | None:
        return self._prices.get(model)

    def worst(self, models: Iterable[str]) -> Price | None:
        """The highest of each price among these models (a fallback may cost more); None
        when none of them has a price, so the request is metered in tokens only."""
        key = tuple(models)
        try:
            return self._worst[key]
        except KeyError:
            pass
        known = [p for p in (self._prices.get(m) for m in key) if p is not None]
        worst = None
        if known:
            inputs, cached, outputs = zip(*((p.input, p.cached_input, p.output) for p in known), strict=True)
            worst = Price(max(inputs), max(cached), max(outputs))
        if len(self._worst) >= _WORST_CACHE_SIZE:
            self._worst.clear()
        self._worst[key] = worst
        return worst


def _micros(usd: float) -> int:
    return round(usd * PER_MILLION)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
