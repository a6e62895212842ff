"""`tollgate compare`: the arms of an alias run side by side, against each other, from the
arm records of the decision log (`gateway/routing/arms.py`).

Per arm and role: requests, error rate, time to first token p50 and p95, mean input and
output tokens and cost per answered request. Percentiles are nearest-rank over the
answered requests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import orjson

_RELATIVE = re.compile(r"^(\d+)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def parse_since(value: str, now: datetime) -> float:
    """Unix seconds from `24h`, `30m`, `7d` (before now), a date (UTC midnight) or an ISO time."""
    relative = _RELATIVE.match(value.strip())
    if relative:
        amount, unit = int(relative.group(1)), relative.group(2)
        return (now - timedelta(**{_UNITS[unit]: amount})).timestamp()
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC).timestamp()
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--since must be like 24h, 30m, 7d, YYYY-MM-DD or an ISO time, got {value!r}"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@dataclass(slots=True)
class ArmStats:
    arm: str
    role: str
    requests: int = 0
    errors: int = 0
    ttfts_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_micros: int = 0

    def add(self, record: dict[str, Any]) -> None:
        self.requests += 1
        if record.get("error") is not None:
            self.errors += 1
            return
        ttft = record.get("ttft_ms")
        if isinstance(ttft, int | float):
            self.ttfts_ms.append(float(ttft))
        self.prompt_tokens += _int(record.get("prompt_tokens"))
        self.completion_tokens += _int(record.get("completion_tokens"))
        self.cost_micros += _int(record.get("cost_micros"))

    def summary(self) -> dict[str, Any]:
        answered = self.requests - self.errors
        per = answered or 1
        return {
            "arm": self.arm,
            "role": self.role,
            "requests": self.requests,
            "error_rate": round(self.errors / self.requests, 4) if self.requests else 0.0,
            "ttft_p50_ms": _percentile(self.ttfts_ms, 0.50),
            "ttft_p95_ms": _percentile(self.ttfts_ms, 0.95),
            "input_tokens_per_request": round(self.prompt_tokens / per, 1),
            "output_tokens_per_request": round(self.completion_tokens / per, 1),
            "cost_usd_per_request": round(self.cost_micros / per / 1e6, 6),
        }


def compare(
    records: Iterable[bytes | str | dict[str, Any]], alias: str, since: float
) -> list[dict[str, Any]]:
    """One summary per (arm, role) of `alias`, primary arms first, from records at or after `since`."""
    stats: dict[tuple[str, str], ArmStats] = {}
    for raw in records:
        record = raw if isinstance(raw, dict) else _parsed(raw)
        if record is None or record.get("type") != "arm" or record.get("alias") != alias:
            continue
        at = record.get("at")
        if not isinstance(at, int | float) or at < since:
            continue
        key = (str(record.get("role")), str(record.get("arm")))
        if key not in stats:
            stats[key] = ArmStats(key[1], key[0])
        stats[key].add(record)
    return [stats[key].summary() for key in sorted(stats)]


def compare_table(summaries: list[dict[str, Any]]) -> str:
    header = (
        "arm",
        "role",
        "requests",
        "errors",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "in_tok",
        "out_tok",
        "usd_per_req",
    )
    lines = [header]
    for s in summaries:
        lines.append(
            (
                s["arm"],
                s["role"],
                str(s["requests"]),
                f"{s['error_rate'] * 100:.1f}%",
                _ms(s["ttft_p50_ms"]),
                _ms(s["ttft_p95_ms"]),
                f"{s['input_tokens_per_request']:.1f}",
                f"{s['output_tokens_per_request']:.1f}",
                f"{s['cost_usd_per_request']:.6f}",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _parsed(line: bytes | str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
