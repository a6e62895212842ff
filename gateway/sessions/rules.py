"""What a session may do: its limits and its checkpoints, as config and the policy decision
(`"session": {...}`, docs/policies.md) settle them for one request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.metering.prices import PER_MILLION

_MODES = ("off", "advise", "compact")


@dataclass(frozen=True, slots=True)
class SessionLimits:
    max_tokens: int | None = None
    max_micros: int | None = None  # dollars, as integer micro-dollars
    max_input_tokens: int | None = None
    # Whether a hard cap is set: asked several times a request (metering's stages), so
    # worked out once, where limits are made (per config, or per decision that sets some).
    capped: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "capped", self.max_tokens is not None or self.max_micros is not None)


@dataclass(frozen=True, slots=True)
class SessionRules:
    """A decision's `session` object; None fields leave the configured value."""

    max_tokens: int | None = None
    max_micros: int | None = None
    max_input_tokens: int | None = None
    checkpoint_mode: str | None = None
    every_turns: int | None = None
    above_tokens: int | None = None


NO_RULES = SessionRules()
NO_LIMITS = SessionLimits()


def parse_session_rules(value: Any) -> SessionRules:
    """Raises ValueError, naming the field, for anything but the documented shape."""
    if not isinstance(value, dict):
        raise ValueError("session must be an object")
    if not value:
        return NO_RULES  # the common case: one shared object
    checkpoint = value.get("checkpoint", {})
    if not isinstance(checkpoint, dict):
        raise ValueError("session.checkpoint must be an object")
    mode = checkpoint.get("mode")
    if mode is not None and mode not in _MODES:
        raise ValueError("session.checkpoint.mode must be off, advise or compact")
    usd = value.get("max_usd")
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, int | float) or usd <= 0):
        raise ValueError("session.max_usd must be a positive number")
    return SessionRules(
        max_tokens=_positive(value, "max_tokens", "session"),
        max_micros=round(usd * PER_MILLION) if usd is not None else None,
        max_input_tokens=_positive(value, "max_input_tokens", "session"),
        checkpoint_mode=mode,
        every_turns=_positive(checkpoint, "every_turns", "session.checkpoint"),
        above_tokens=_positive(checkpoint, "above_tokens", "session.checkpoint"),
    )


def _positive(value: dict[str, Any], name: str, where: str) -> int | None:
    number = value.get(name)
    if number is not None and (not isinstance(number, int) or isinstance(number, bool) or number < 1):
        raise ValueError(f"{where}.{name} must be a positive integer")
    return number
