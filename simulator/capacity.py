"""Capacity that changes over time: a schedule of windows during which inference gets HTTP 429.

A window ``{"start_s", "end_s", "code"?}`` is measured in seconds from when the schedule was set
(the simulator's start for ``SimConfig.capacity``); with ``repeat_s`` the schedule starts over
every that many seconds. ``code`` is the Workers AI internal code of the 429: 3040 (out of
capacity, the default), 3021 (requests-per-minute limit) or 3036 (daily free allocation used
up). During a window synchronous requests are refused and queued batches do not advance.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

CODES: dict[int, str] = {
    3040: "No more data centers to forward the request to",
    3021: "rate limiting: inference request per min rate reached",
    3036: "You have used up your daily free allocation of 10,000 neurons",
}
REJECT_IF_BUSY_MESSAGE = "Capacity temporarily exceeded, please try again."


@dataclass(frozen=True, slots=True)
class CapacityWindow:
    start_s: float
    end_s: float
    code: int = 3040

    def __post_init__(self) -> None:
        if not 0 <= self.start_s < self.end_s:
            raise ValueError("a capacity window needs 0 <= start_s < end_s")
        if self.code not in CODES:
            raise ValueError(f"capacity window code must be one of {sorted(CODES)}")

    def message(self, reject_if_busy: bool) -> str:
        return REJECT_IF_BUSY_MESSAGE if self.code == 3040 and reject_if_busy else CODES[self.code]


def parse_windows(raw: Any) -> tuple[CapacityWindow, ...]:
    """Windows from a JSON array of ``{"start_s", "end_s", "code"?}``; ``ValueError`` if malformed."""
    if not isinstance(raw, list):
        raise ValueError("'windows' must be an array")
    windows = []
    for item in raw:
        if not isinstance(item, dict):
            raise ValueError("each window must be an object")
        numbers = [item.get("start_s"), item.get("end_s")]
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in numbers):
            raise ValueError("a window needs numeric 'start_s' and 'end_s'")
        code = item.get("code", 3040)
        if isinstance(code, bool) or not isinstance(code, int):
            raise ValueError("a window's 'code' must be an integer")
        windows.append(CapacityWindow(float(numbers[0]), float(numbers[1]), code))  # type: ignore[arg-type]
    return tuple(windows)


def parse_spec(spec: str) -> tuple[CapacityWindow, ...]:
    """The CLI form: ``START-END[:CODE],...`` in seconds, e.g. ``10-20,40-45:3021``."""
    windows = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        span, _, code = part.partition(":")
        start, _, end = span.partition("-")
        try:
            windows.append(CapacityWindow(float(start), float(end), int(code) if code else 3040))
        except ValueError as exc:
            raise ValueError(f"bad capacity window {part!r}: {exc}") from None
    return tuple(windows)


class CapacitySchedule:
    """The windows in force; thread-safe, so tests may change it from their own thread."""

    def __init__(
        self,
        windows: Iterable[CapacityWindow] = (),
        repeat_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: tuple[CapacityWindow, ...] = ()
        self._repeat_s: float | None = None
        self._origin = 0.0
        self.set(windows, repeat_s)

    def set(self, windows: Iterable[CapacityWindow], repeat_s: float | None = None) -> None:
        """Replace the schedule; its clock starts now."""
        if repeat_s is not None and repeat_s <= 0:
            raise ValueError("repeat_s must be positive")
        with self._lock:
            self._windows = tuple(windows)
            self._repeat_s = repeat_s
            self._origin = self._clock()

    def clear(self) -> None:
        self.set(())

    def current(self) -> CapacityWindow | None:
        """The window in force now, None when there is capacity."""
        windows = self._windows
        if not windows:  # fast path, no lock: the common case in benchmarks
            return None
        with self._lock:
            elapsed = self._clock() - self._origin
            if self._repeat_s is not None:
                elapsed %= self._repeat_s
            return next((w for w in self._windows if w.start_s <= elapsed < w.end_s), None)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "windows": [{"start_s": w.start_s, "end_s": w.end_s, "code": w.code} for w in self._windows],
                "repeat_s": self._repeat_s,
            }
