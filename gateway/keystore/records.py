"""What a live key is, as stored and as read back; shared by the core and the key stores.

A stored key is its hash (never the key), its tenant and what it says about its requests
(label, labels, default workflow, priority, budgets and rate limits), all fixed when it is made,
plus the two things that change later: when it expires and when it was revoked. Every
change takes the store's next version number, so a reader that knows version N asks only
for what changed after N.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.config import BudgetConfig, RateLimitConfig


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's own budgets and rate limits, on top of its tenant's (metering applies them)."""

    budgets: tuple[BudgetConfig, ...] = ()
    rate_limits: RateLimitConfig | None = None

    @property
    def empty(self) -> bool:
        return not self.budgets and self.rate_limits is None


@dataclass(frozen=True, slots=True)
class LiveKey:
    id: str  # key_id(hash): the short, non-secret name used in logs, metrics and the ledger
    tenant: str
    hash: str  # sha256:<hex> of the key
    created_at_ms: int
    label: str = ""  # its name for people (and the workflow of its requests, failing both below)
    labels: tuple[tuple[str, str], ...] = ()  # operators' own key=value metadata (team, env, ...)
    workflow: str | None = None  # the request's workflow when it sends no x-workflow header
    priority: str | None = None  # the request's priority when it sends no x-priority (else normal)
    limits: KeyLimits = field(default_factory=KeyLimits)
    rotated_from: str | None = None  # id of the key this one replaced
    created_by: str = ""  # the credential that made it ("admin:<id>", "cli:<user>")
    expires_at_ms: int | None = None
    revoked_at_ms: int | None = None
    version: int = 0  # the store's version of the key's last change

    def usable_at(self, now_ms: int) -> bool:
        return self.revoked_at_ms is None and (self.expires_at_ms is None or now_ms < self.expires_at_ms)

    def state_at(self, now_ms: int) -> str:
        if self.revoked_at_ms is not None:
            return "revoked"
        if self.expires_at_ms is not None and now_ms >= self.expires_at_ms:
            return "expired"
        return "active"

    def fixed_doc(self) -> bytes:
        """The parts fixed at creation, as stored (JSON)."""
        return orjson.dumps(
            {
                "label": self.label,
                "labels": dict(self.labels),
                "workflow": self.workflow,
                "priority": self.priority,
                "budgets": [b.model_dump(exclude_none=True) for b in self.limits.budgets],
                "rate_limits": (
                    self.limits.rate_limits.model_dump(exclude_none=True) if self.limits.rate_limits else None
                ),
                "rotated_from": self.rotated_from,
                "created_by": self.created_by,
                "created_at_ms": self.created_at_ms,
            }
        )

    @classmethod
    def from_stored(
        cls,
        key_id: str,
        tenant: str,
        key_hash: str,
        doc: bytes,
        expires_at_ms: int | None,
        revoked_at_ms: int | None,
        version: int,
    ) -> LiveKey:
        fixed: dict[str, Any] = orjson.loads(doc)
        rates = fixed.get("rate_limits")
        return cls(
            id=key_id,
            tenant=tenant,
            hash=key_hash,
            created_at_ms=int(fixed.get("created_at_ms", 0)),
            label=fixed.get("label", ""),
            labels=tuple(sorted((fixed.get("labels") or {}).items())),
            workflow=fixed.get("workflow"),
            priority=fixed.get("priority"),
            limits=KeyLimits(
                tuple(BudgetConfig.model_validate(b) for b in fixed.get("budgets", [])),
                RateLimitConfig.model_validate(rates) if rates else None,
            ),
            rotated_from=fixed.get("rotated_from"),
            created_by=fixed.get("created_by", ""),
            expires_at_ms=expires_at_ms,
            revoked_at_ms=revoked_at_ms,
            version=version,
        )


@dataclass(frozen=True, slots=True)
class KeyChanges:
    """The store's version now, and every key changed after the version asked about."""

    version: int
    keys: tuple[LiveKey, ...]


class KeyConflict(Exception):
    """The store already holds a key of that id (or hash)."""


class KeyNotFound(Exception):
    """The store holds no key of that id."""


class KeyNotUsable(Exception):
    """The key is revoked or expired: it cannot be rotated."""
