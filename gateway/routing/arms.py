"""Side-by-side arms: what one request did on one arm of an alias, for comparisons.

An alias run side by side (a split, or a mirror) records every request it serves (the
primary arm: the candidate that answered) and every shadow call its mirrors make, as an
`ArmRecord`: to the metrics (`tollgate_arm_*`) and to the decision log (`type: "arm"`),
which `tollgate compare` reads. Counts and codes only, never text.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

Role = Literal["primary", "shadow"]
RECORD_VERSION = 1


@dataclass(frozen=True, slots=True)
class ArmRecord:
    alias: str  # the alias run side by side
    arm: str  # the candidate: upstream/model
    role: Role
    tenant: str
    request_id: str
    ttft_s: float | None  # to the first byte of the answer (a stream's first event); None: no answer
    duration_s: float
    prompt_tokens: int
    completion_tokens: int
    cost_micros: int
    finish_reason: str | None
    error: str | None  # a gateway error code; None when the arm answered
    at: float  # unix seconds when the request was made

    def record(self) -> dict[str, Any]:
        """The decision-log record (times in milliseconds, as the other records have them)."""
        fields = asdict(self)
        ttft, duration = fields.pop("ttft_s"), fields.pop("duration_s")
        return {
            "v": RECORD_VERSION,
            "type": "arm",
            **fields,
            "ttft_ms": None if ttft is None else round(ttft * 1000, 3),
            "duration_ms": round(duration * 1000, 3),
        }


def wall_clock_at(monotonic_then: float) -> float:
    """The unix time of a time.monotonic() reading taken earlier."""
    return time.time() - (time.monotonic() - monotonic_then)
