"""The meter stage's record of one request, which the settle finisher closes."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.metering.plan import MeterPlan, Periods
from gateway.metering.records import BudgetCharge, RateCharge


@dataclass(slots=True)
class MeterTicket:
    reservation_id: str
    plan: MeterPlan
    periods: Periods  # the day and month the request is metered in
    budgets: tuple[BudgetCharge, ...] = ()  # what was reserved
    rates: tuple[RateCharge, ...] = ()  # what was taken from the rate limits
    reserved: bool = False  # a reservation is open in the store
    input_tokens: int = 0  # the upper-bound estimate that was reserved
    output_tokens: int = 0  # the output bound that was reserved (max tokens times choices)
    replayed: bool = False  # answered from a stored response: nothing to settle
