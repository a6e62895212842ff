"""The spend ledger as reports: JSON for /admin/spend, a table for `tollgate spend`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import date
from typing import Any

from gateway.metering.records import SpendRow

_COUNTS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")


def parse_day(value: str, name: str) -> str:
    """A YYYY-MM-DD date, checked; raises ValueError naming the parameter."""
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise ValueError(f"{name} must be a date as YYYY-MM-DD, got {value!r}") from None


def default_range(today: date) -> tuple[str, str]:
    """From the first of the month to today."""
    return today.replace(day=1).isoformat(), today.isoformat()


def spend_document(rows: Sequence[SpendRow], since: str, until: str) -> dict[str, Any]:
    data = [{**asdict(row), "cost_usd": row.cost_micros / 1e6} for row in rows]
    total = {name: sum(getattr(row, name) for row in rows) for name in _COUNTS}
    return {
        "object": "spend",
        "since": since,
        "until": until,
        "data": data,
        "total": {**total, "cost_usd": total["cost_micros"] / 1e6},
    }


def spend_table(rows: Sequence[SpendRow]) -> str:
    header = ("tenant", "day", "key", "model", "requests", "prompt", "cached", "completion", "cost_usd")
    lines = [header]
    for row in rows:
        lines.append(
            (
                row.tenant,
                row.day,
                row.key_id,
                row.model,
                str(row.requests),
                str(row.prompt_tokens),
                str(row.cached_tokens),
                str(row.completion_tokens),
                f"{row.cost_micros / 1e6:.6f}",
            )
        )
    cost = sum(row.cost_micros for row in rows)
    lines.append(("total", "", "", "", str(sum(r.requests for r in rows)), "", "", "", f"{cost / 1e6:.6f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )
