"""The session facts a policy sees (`input.session_state`, docs/policies.md): coarse bands of
the record as admission read it, so that decisions stay cacheable."""

from __future__ import annotations

from gateway.sessions.records import SessionRecord

_TURNS = ((1, "1"), (2, "2-3"), (4, "4-7"), (8, "8-15"), (16, "16-31"), (32, "32-63"), (64, "64+"))
_TOKENS = ((1, "<10k"), (10_000, "10k-100k"), (100_000, "100k-1M"), (1_000_000, "1M+"))
_SPEND = ((1, "<$0.01"), (10_000, "$0.01-$1"), (1_000_000, "$1-$10"), (10_000_000, "$10+"))
_GROWTH = ((1, "<1k"), (1_000, "1k-10k"), (10_000, "10k+"))

NO_SESSION: dict[str, str] = {"turns": "0", "tokens": "0", "spend": "0", "growth": "0"}


def session_bands(record: SessionRecord | None) -> dict[str, str]:
    """Turns so far, cumulative tokens (input + output), spend, and input growth per turn."""
    if record is None:
        return NO_SESSION
    return {
        "turns": _band(record.turns, _TURNS),
        "tokens": _band(record.input_tokens + record.output_tokens, _TOKENS),
        "spend": _band(record.cost_micros, _SPEND),
        "growth": _band(max(0, round(record.growth_slope)), _GROWTH),
    }


def _band(value: int, bands: tuple[tuple[int, str], ...]) -> str:
    label = "0"
    for lower, name in bands:
        if value < lower:
            break
        label = name
    return label
