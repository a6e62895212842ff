"""The spend ledger as reports: JSON for /admin/spend, a table for `tollgate spend`.

Rows are (tenant, day, key, model, workflow); a report may group them by one of
`GROUPS`, each group the exact sum of its rows, so the groups of any one dimension add up
to the same total (spend by workflow sums to spend by tenant, to the micro-dollar).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import date
from typing import Any

from gateway.metering.records import SpendRow

_COUNTS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")
GROUPS = {"tenant": "tenant", "key": "key_id", "model": "model", "workflow": "workflow", "day": "day"}
"""What a report may be grouped by, and the row field each names."""


def parse_day(value: str, name: str) -> str:
    """A YYYY-MM-DD date, checked; raises ValueError naming the parameter."""
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise ValueError(f"{name} must be a date as YYYY-MM-DD, got {value!r}") from None


def parse_group(value: str, name: str) -> str:
    """A dimension of GROUPS, checked; raises ValueError naming the parameter."""
    if value not in GROUPS:
        raise ValueError(f"{name} must be one of {', '.join(GROUPS)}, got {value!r}")
    return value


def default_range(today: date) -> tuple[str, str]:
    """From the first of the month to today."""
    return today.replace(day=1).isoformat(), today.isoformat()


def grouped(rows: Sequence[SpendRow], by: str) -> list[dict[str, Any]]:
    """One entry per value of the dimension `by` (a GROUPS name), its counts summed, by name."""
    field = GROUPS[by]
    sums: dict[str, dict[str, int]] = {}
    for row in rows:
        totals = sums.setdefault(getattr(row, field), dict.fromkeys(_COUNTS, 0))
        for name in _COUNTS:
            totals[name] += getattr(row, name)
    return [{by: value, **totals} for value, totals in sorted(sums.items())]


def spend_document(
    rows: Sequence[SpendRow], since: str, until: str, group_by: str | None = None
) -> dict[str, Any]:
    entries = [asdict(row) for row in rows] if group_by is None else grouped(rows, group_by)
    data = [{**entry, "cost_usd": entry["cost_micros"] / 1e6} for entry in entries]
    total = {name: sum(getattr(row, name) for row in rows) for name in _COUNTS}
    return {
        "object": "spend",
        "since": since,
        "until": until,
        **({"group_by": group_by} if group_by is not None else {}),
        "data": data,
        "total": {**total, "cost_usd": total["cost_micros"] / 1e6},
    }


def spend_table(rows: Sequence[SpendRow], group_by: str | None = None) -> str:
    counts = ("requests", "prompt", "cached", "completion", "cost_usd")
    if group_by is None:
        header: tuple[str, ...] = ("tenant", "day", "key", "model", "workflow", *counts)
        lines = [header]
        for row in rows:
            names = (row.tenant, row.day, row.key_id, row.model, row.workflow)
            lines.append((*names, *_figures(asdict(row))))
    else:
        header = (group_by, *counts)
        lines = [header]
        for entry in grouped(rows, group_by):
            lines.append((str(entry[group_by]), *_figures(entry)))
    cost = sum(row.cost_micros for row in rows)
    blanks = ("",) * (len(header) - 6)
    lines.append(("total", *blanks, str(sum(r.requests for r in rows)), "", "", "", f"{cost / 1e6:.6f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _figures(entry: dict[str, Any]) -> tuple[str, ...]:
    return (
        str(entry["requests"]),
        str(entry["prompt_tokens"]),
        str(entry["cached_tokens"]),
        str(entry["completion_tokens"]),
        f"{entry['cost_micros'] / 1e6:.6f}",
    )
