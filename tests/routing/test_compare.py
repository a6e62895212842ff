"""The side-by-side report over arm records: per arm and role, error rate, TTFT percentiles,
tokens and cost per request; other aliases and older records left out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from gateway.routing.compare import compare, parse_since

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def arm(role: str, name: str, ttft: float | None, error: str | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "type": "arm",
        "alias": kw.pop("alias", "kimi"),
        "arm": name,
        "role": role,
        "at": kw.pop("at", NOW.timestamp()),
        "ttft_ms": ttft,
        "error": error,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "cost_micros": 1_000,
        **kw,
    }


def test_each_arm_is_summarised_on_its_own() -> None:
    records: list[Any] = [arm("primary", "a/m1", float(ms)) for ms in range(1, 101)]
    records += [arm("shadow", "b/m2", 500.0), arm("shadow", "b/m2", None, "upstream_error")]
    records += [
        orjson.dumps(arm("primary", "a/m1", 9999.0, alias="other")),
        b"not json",
        {"type": "completion"},
    ]
    records.append(arm("primary", "a/m1", 9999.0, at=NOW.timestamp() - 7200))
    [primary, shadow] = compare(records, "kimi", NOW.timestamp() - 3600)
    assert (primary["role"], primary["arm"], primary["requests"]) == ("primary", "a/m1", 100)
    assert primary["ttft_p50_ms"] == 50.0
    assert primary["ttft_p95_ms"] == 95.0
    assert primary["error_rate"] == 0.0
    assert primary["cost_usd_per_request"] == 0.001
    assert (shadow["requests"], shadow["error_rate"], shadow["ttft_p50_ms"]) == (2, 0.5, 500.0)
    assert shadow["output_tokens_per_request"] == 20.0  # per answered request


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("24h", datetime(2026, 11, 25, 12, 0, tzinfo=UTC)),
        ("30m", datetime(2026, 11, 26, 11, 30, tzinfo=UTC)),
        ("2026-11-20", datetime(2026, 11, 20, tzinfo=UTC)),
        ("2026-11-20T08:00:00+00:00", datetime(2026, 11, 20, 8, tzinfo=UTC)),
    ],
)
def test_since_takes_relative_and_absolute_times(value: str, expected: datetime) -> None:
    assert parse_since(value, NOW) == expected.timestamp()


def test_a_bad_since_is_refused() -> None:
    with pytest.raises(ValueError, match="--since must be like"):
        parse_since("last tuesday", NOW)
