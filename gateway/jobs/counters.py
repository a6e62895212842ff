"""What the job runner counts, for metrics: written by the runner, read by telemetry."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class JobCounters:
    completed: Counter[str] = field(default_factory=Counter)  # final state -> jobs finished by this worker
    retries: Counter[str] = field(default_factory=Counter)  # cause (an error code) -> jobs sent back to wait
    _completion: Callable[[float], None] | None = None

    def observe_completion(self, observe: Callable[[float], None]) -> None:
        """`observe(seconds)` for each job finished, from its submission to its result."""
        self._completion = observe

    def finished(self, state: str, seconds: float) -> None:
        self.completed[state] += 1
        if self._completion is not None:
            self._completion(seconds)
