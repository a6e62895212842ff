"""The sliding window: redacting a stream without waiting for its end.

A window receives a stream's text piece by piece and releases, at once, everything that
can no longer be part of a match: it holds back only from the earliest point where a
match may still be in progress (the `hold` its finder reports), so ordinary text passes
straight through and time to first token barely moves. Released text is final and is
exactly what redacting the whole text at the end would have produced for that stretch.

A few characters already released are kept as context, so that look-behinds at the
start of the next stretch see what they would see in the whole text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.redaction.detector import Found, replaced

CONTEXT = 32
"""Released characters kept for look-behinds (the built-in patterns look back one)."""


class Finder(Protocol):
    def find(self, text: str) -> list[Found]: ...

    def scan(self, text: str, pos: int, final: bool = False) -> tuple[list[Found], int]: ...


Replacement = Callable[[Found, str], str]


class SlidingWindow:
    """Push text in, get redacted text out; `flush` when the stream ends.

    With `stop_at_first`, the first entity ends the stream: the text before it is
    released, and it and everything after are withheld (`stopped` names its kind).
    """

    __slots__ = ("_context", "_finder", "_pending", "_replacement", "_stop_at_first", "stopped")

    def __init__(self, finder: Finder, replacement: Replacement, stop_at_first: bool = False) -> None:
        self._finder = finder
        self._replacement = replacement
        self._stop_at_first = stop_at_first
        self._context = ""
        self._pending = ""
        self.stopped: str | None = None

    @property
    def holding(self) -> int:
        return len(self._pending)

    def push(self, text: str) -> str:
        if self.stopped is not None:
            return ""
        buffer = self._context + self._pending + text
        pos = len(self._context)
        found, hold = self._finder.scan(buffer, pos)
        return self._release(buffer, pos, hold, found)

    def defer(self, text: str) -> None:
        """Take `text` without looking at it yet: the next `push` (or `flush`) scans it with
        its own, and releases what `push`ing each piece would have released in all. For text
        whose release could not go out before the next push's anyway (Pipeline.relay)."""
        if self.stopped is None:
            self._pending += text

    def abandon(self) -> str:
        """The raw text held back, handed over unredacted (fail-open after a failure)."""
        held, self._pending = self._pending, ""
        return held

    def flush(self) -> str:
        if self.stopped is not None or not self._pending:
            return ""
        buffer = self._context + self._pending
        pos = len(self._context)
        found, _ = self._finder.scan(buffer, pos, final=True)
        return self._release(buffer, pos, len(buffer), found)

    def _release(self, buffer: str, pos: int, hold: int, found: Sequence[Found]) -> str:
        self._context = buffer[max(0, hold - CONTEXT) : hold]
        self._pending = buffer[hold:]
        if not found:
            return buffer[pos:hold]
        if self._stop_at_first:
            self.stopped = found[0].kind
            self._pending = ""
            return buffer[pos : found[0].start]
        parts: list[str] = []
        last = pos
        for item in found:
            parts.append(buffer[last : item.start])
            parts.append(self._replacement(item, buffer[item.start : item.end]))
            last = item.end
        parts.append(buffer[last:hold])
        return "".join(parts)


def redact_whole(finder: Finder, text: str, replacement: Replacement, stop_at_first: bool = False) -> str:
    """What a window releases in total for `text`, computed in one go (the non-streamed path)."""
    found = finder.find(text)
    if not found:
        return text
    if stop_at_first:
        return text[: found[0].start]
    return replaced(text, found, replacement)
