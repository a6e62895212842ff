"""The meter stage's record of one request, which the settle finisher closes."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.metering.lease import LeaseDraw
from gateway.metering.plan import MeterPlan, Periods
from gateway.metering.records import BudgetCharge, RateCharge


@dataclass(slots=True, init=False)
class MeterTicket:
    reservation_id: str
    plan: MeterPlan
    periods: Periods  # the day and month the request is metered in
    budgets: tuple[BudgetCharge, ...]  # what was reserved
    rates: tuple[RateCharge, ...]  # what was taken from the rate limits
    reserved: bool  # a reservation is open in the store
    # A reserve went unanswered (a timeout, a lost connection, the request cancelled): the
    # store may still apply it, so settle releases the id even though the request was refused.
    reserve_unanswered: bool
    input_tokens: int  # the upper-bound estimate that was reserved
    output_tokens: int  # the output bound that was reserved (max tokens times choices)
    replayed: bool  # answered from a stored response: nothing to settle
    lease: LeaseDraw | None  # admitted against this worker's lease, not reserved on its own

    # Written out: under mypyc (setup.py) a dataclass's generated __init__ runs interpreted.
    def __init__(
        self,
        reservation_id: str,
        plan: MeterPlan,
        periods: Periods,
        budgets: tuple[BudgetCharge, ...] = (),
        rates: tuple[RateCharge, ...] = (),
        reserved: bool = False,
        reserve_unanswered: bool = False,
        input_tokens: int = 0,
        output_tokens: int = 0,
        replayed: bool = False,
        lease: LeaseDraw | None = None,
    ) -> None:
        self.reservation_id = reservation_id
        self.plan = plan
        self.periods = periods
        self.budgets = budgets
        self.rates = rates
        self.reserved = reserved
        self.reserve_unanswered = reserve_unanswered
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.replayed = replayed
        self.lease = lease
