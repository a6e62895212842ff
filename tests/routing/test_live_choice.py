"""Spill by live signal: an alias's candidates by least latency or least cost, each session
keeping the home it was given while that candidate is allowed."""

from __future__ import annotations

import asyncio

from gateway.exchange import Attempt, Candidate, Endpoint, Exchange
from gateway.metering.prices import Price, PriceBook
from gateway.routing.choice import LatencyBoard, LiveChoice

FAST = Candidate("gpu-pool", "k26")
SLOW = Candidate("workers-ai", "@cf/k26")
CHEAP = Candidate("local", "small")
PRICES = PriceBook(
    {
        "k26": Price.from_usd(0.95, 0.16, 4.0),
        "@cf/k26": Price.from_usd(0.95, 0.16, 4.0),
        "small": Price.from_usd(0.1, 0.1, 0.2),
    }
)


def test_least_latency_puts_the_candidate_answering_fastest_first() -> None:
    board = LatencyBoard()
    choice = LiveChoice("least_latency", board, PRICES)
    board.observe(SLOW.arm, 0.9)
    board.observe(FAST.arm, 0.2)
    assert choice.ordered(None, [SLOW, FAST]) == [FAST, SLOW]
    for _ in range(20):  # the fast one slows down; the mean follows
        board.observe(FAST.arm, 2.0)
    assert choice.ordered(None, [SLOW, FAST]) == [SLOW, FAST]


def test_a_candidate_not_yet_measured_is_tried_first() -> None:
    board = LatencyBoard()
    board.observe(SLOW.arm, 0.5)
    assert LiveChoice("least_latency", board, PRICES).ordered(None, [SLOW, FAST]) == [FAST, SLOW]


def test_least_cost_orders_by_price_and_an_unpriced_model_goes_last() -> None:
    unpriced = Candidate("local", "mystery")
    choice = LiveChoice("least_cost", LatencyBoard(), PRICES)
    assert choice.ordered(None, [unpriced, SLOW, CHEAP]) == [CHEAP, SLOW, unpriced]


def test_a_session_keeps_its_home_while_the_signal_moves() -> None:
    board = LatencyBoard()
    choice = LiveChoice("least_latency", board, PRICES)
    board.observe(FAST.arm, 0.1)
    board.observe(SLOW.arm, 0.5)
    assert choice.ordered("session-1", [SLOW, FAST])[0] == FAST
    for _ in range(20):
        board.observe(FAST.arm, 3.0)
    assert choice.ordered("session-1", [SLOW, FAST])[0] == FAST  # its cache is there
    assert choice.ordered("session-2", [SLOW, FAST])[0] == SLOW  # a new session follows the signal
    assert choice.ordered("session-1", [SLOW])[0] == SLOW  # a home no longer allowed is left


def test_the_homes_table_is_bounded() -> None:
    choice = LiveChoice("least_cost", LatencyBoard(), PRICES, homes_max=3)
    for i in range(10):
        choice.ordered(f"s{i}", [SLOW, CHEAP])
    assert choice.homes == 3


def test_the_board_learns_from_finished_requests() -> None:
    board = LatencyBoard()
    exchange = Exchange("r", Endpoint.CHAT, 0.0, 30.0, {}, b"")
    exchange.attempts = [Attempt("gpu-pool", "k26", started_at=10.0, ended_at=10.4, status=200)]
    exchange.first_byte_at = 10.25
    asyncio.run(board.finish(exchange))
    assert board.of(FAST.arm) == 0.25
