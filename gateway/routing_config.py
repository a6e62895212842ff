"""The `routing:` block of the config file: request labels, named prompt families, and how
side-by-side runs and live-signal choices behave (see README, "Routing by workflow").

Kept apart from gateway/config.py, which includes it as `GatewayConfig.routing`; per-alias
weights and mirrors are on the candidates themselves (`CandidateConfig.weight`, `.mirror`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.telemetry_config import WORKFLOW_PATTERN

PRIORITIES = ("critical", "normal", "background")
Priority = Literal["critical", "normal", "background"]
DIGEST_PATTERN = r"[0-9a-f]{12,64}"
"""A prompt family's digest: the leading hex digits (12 at least) of SHA-256 of its system prompt."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MirrorConfig(_Strict):
    """Shadow calls (a candidate with `mirror: <percent>`): never answered to the client."""

    max_in_flight: int = Field(8, ge=1, le=1024)  # per worker; a mirror beyond it is skipped, and counted
    timeout_s: float = Field(120.0, gt=0)  # a shadow call is abandoned (and counted failed) after this
    # Record a shadow call's cost in the tenant's ledger, as workflow "shadow" of the key
    # "shadow": never on a budget, but visible (`tollgate spend --by workflow`).
    meter: bool = False


class RoutingConfig(_Strict):
    # x-workflow values the policy, the spend ledger and the spend metrics know; any other
    # value is "other", a request without one is its key's `workflow`, else "default".
    # Empty: telemetry.labels.workflows, if that lists any.
    workflows: list[str] = []
    # Named prompt families for the cache-hit metrics: name -> digest of the system prompt.
    # An `x-prompt-family` header naming one of them is taken as well; the rest stay hashed buckets.
    prompt_families: dict[str, str] = Field({}, max_length=64)
    # Per alias, how to pick among its candidates: in order (the default), the least latency
    # seen lately (time to first token), or the lowest price. Sessions keep the home they have.
    choose: dict[str, Literal["ordered", "least_latency", "least_cost"]] = {}
    mirror: MirrorConfig = MirrorConfig()

    @field_validator("workflows")
    @classmethod
    def _workflow_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(WORKFLOW_PATTERN, name) or name in ("other", "default", "shadow"):
                raise ValueError(
                    f"workflow {name!r} must match {WORKFLOW_PATTERN} (other, default, shadow are taken)"
                )
        return v

    @field_validator("prompt_families")
    @classmethod
    def _families(cls, v: dict[str, str]) -> dict[str, str]:
        for name, digest in v.items():
            if not re.fullmatch(WORKFLOW_PATTERN, name):
                raise ValueError(f"prompt family {name!r} must match {WORKFLOW_PATTERN}")
            if not re.fullmatch(DIGEST_PATTERN, digest):
                raise ValueError(f"prompt family {name!r}: the digest must be 12 to 64 lower-case hex digits")
        return v
