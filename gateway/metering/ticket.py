"""The meter stage's record of one request, which the settle finisher closes."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.metering.lease import LeaseDraw
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
    # A reserve went unanswered (a timeout, a lost connection, the request cancelled): the
    # store may still apply it, so settle releases the id even though the request was refused.
    reserve_unanswered: bool = False
    input_tokens: int = 0  # the upper-bound estimate that was reserved
    output_tokens: int = 0  # the output bound that was reserved (max tokens times choices)
    replayed: bool = False  # answered from a stored response: nothing to settle
    lease: LeaseDraw | None = None  # admitted against this worker's lease, not reserved on its own
