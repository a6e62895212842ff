"""Prices: integer micro-dollars, cached input at its own price, the worst of the candidates."""

from __future__ import annotations

from gateway.config import PriceConfig
from gateway.metering.prices import Price, PriceBook

K26 = "@cf/moonshotai/kimi-k2.6"
K27 = "@cf/moonshotai/kimi-k2.7-code"


def test_the_kimi_defaults_are_built_in_and_k25_is_priced_as_k26() -> None:
    book = PriceBook.from_config({})
    assert book.get(K26) == Price(950_000, 160_000, 4_000_000)
    assert book.get(K27) == Price(950_000, 190_000, 4_000_000)
    assert book.get("@cf/moonshotai/kimi-k2.5") == book.get(K26)
    assert book.get("unknown-model") is None


def test_cached_tokens_are_part_of_the_prompt_and_billed_at_the_cached_price() -> None:
    # Cloudflare's observed usage: 1,695 prompt tokens of which 1,694 cached, 76 completion.
    cost = PriceBook.from_config({}).get(K26)
    assert cost is not None
    exact = 1 * 0.95 + 1694 * 0.16 + 76 * 4.00  # micro-dollars
    assert cost.cost_micros(1695, 1694, 76) == 576  # 575.99, rounded up to a micro-dollar
    assert cost.cost_micros(1695, 1694, 76) - exact < 1
    assert cost.cost_micros(10, 50, 0) == cost.cost_micros(10, 10, 0)  # never more cached than prompt


def test_config_prices_override_and_add_with_cached_defaulting_to_input() -> None:
    book = PriceBook.from_config(
        {K26: PriceConfig(input=1, cached_input=0.5, output=2), "mine": PriceConfig(input=3, output=6)}
    )
    assert book.get(K26) == Price(1_000_000, 500_000, 2_000_000)
    assert book.get("mine") == Price(3_000_000, 3_000_000, 6_000_000)


def test_the_worst_price_among_candidates_is_taken_per_component() -> None:
    book = PriceBook({"a": Price(1, 9, 5), "b": Price(4, 2, 3)})
    assert book.worst(["a", "b", "unpriced"]) == Price(4, 9, 5)
    assert book.worst(["unpriced"]) is None
