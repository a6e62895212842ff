"""A session's hard caps as budget charges, reserved by the meter stage in the same atomic
store step as the request's own budgets and rate limits: all of them or none, so no number
of concurrent requests takes a session past its cap. Counters `s.<session key>:tok` (input +
output tokens) and `s.<session key>:usd` (micro-dollars), kept as long as the record."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.exchange import Exchange
from gateway.metering.records import BudgetCharge
from gateway.sessions.refusals import SessionBudgetExceeded, session_budget_exceeded

_TOKENS = ":tok"


def capped(exchange: Exchange) -> bool:
    return exchange.session is not None and exchange.session.limits.capped


def session_charges(exchange: Exchange, tokens: int, micros: int, idle_s: int) -> tuple[BudgetCharge, ...]:
    ticket = exchange.session
    if ticket is None or not ticket.limits.capped:
        return ()
    limits, expires_at = ticket.limits, int(time.time()) + idle_s
    charges = []
    if limits.max_tokens is not None:
        charges.append(BudgetCharge(f"s.{ticket.key}{_TOKENS}", tokens, limits.max_tokens, True, expires_at))
    if limits.max_micros is not None:
        charges.append(BudgetCharge(f"s.{ticket.key}:usd", micros, limits.max_micros, True, expires_at))
    return tuple(charges)


def refusal(charges: Sequence[BudgetCharge], used: Sequence[int]) -> SessionBudgetExceeded | None:
    """The refusal for the first session cap a reservation could not take, if any."""
    for charge, before in zip(charges, used, strict=False):
        if before + charge.amount > charge.limit:
            what = "tokens" if charge.counter.endswith(_TOKENS) else "spend (micro-dollars)"
            return session_budget_exceeded(what, before, charge.amount, charge.limit)
    return None


def spent(charges: Sequence[BudgetCharge], tokens: int, micros: int) -> tuple[tuple[str, int, int], ...]:
    """What a settle adds to the session's counters: the actual tokens and cost."""
    return tuple(
        (c.counter, tokens if c.counter.endswith(_TOKENS) else micros, c.expires_at) for c in charges
    )
