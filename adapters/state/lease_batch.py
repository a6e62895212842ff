"""A settle batch folded into the sums a store applies: spent per counter, rate refunds per
limit, ledger increments per day and (key, model, workflow). Shared by the Redis and SQLite stores,
so both apply a batch the same way, in one step whatever its size."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.metering.lease_records import SettleBatch

LEDGER_FIELDS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")


@dataclass(slots=True)
class FoldedBatch:
    spent: dict[str, list[int]] = field(default_factory=dict)  # counter -> [amount, expires_at]
    refunds: dict[str, int] = field(default_factory=dict)  # rate counter -> increment_us given back
    # day -> (key_id, model, workflow) -> the five ledger sums, in LEDGER_FIELDS order
    ledger: dict[str, dict[tuple[str, str, str], list[int]]] = field(default_factory=dict)


def fold(batch: SettleBatch) -> FoldedBatch:
    folded = FoldedBatch()
    for settlement in batch.settlements:
        for counter, amount, expires_at in settlement.spent:
            sums = folded.spent.setdefault(counter, [0, expires_at])
            sums[0] += amount
            sums[1] = max(sums[1], expires_at)
        for refund in settlement.refunds:
            folded.refunds[refund.counter] = folded.refunds.get(refund.counter, 0) + refund.increment_us
        entry = settlement.ledger
        if entry is not None:
            key = (entry.key_id, entry.model, entry.workflow)
            row = folded.ledger.setdefault(entry.day, {}).setdefault(key, [0] * 5)
            row[0] += entry.requests
            row[1] += entry.prompt_tokens
            row[2] += entry.cached_tokens
            row[3] += entry.completion_tokens
            row[4] += entry.cost_micros
    return folded
