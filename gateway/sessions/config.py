"""The `sessions` block of the config, and the per-tenant and per-key session settings
(parsed by gateway/config.py; README, "Sessions")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

CheckpointMode = Literal["off", "advise", "compact"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionLimitsConfig(_Strict):
    """Hard caps on one session, and a ceiling on each of its requests' input."""

    max_tokens: int | None = Field(None, ge=1)  # input + output tokens of the whole session
    max_usd: float | None = Field(None, gt=0)  # spend of the whole session
    max_input_tokens: int | None = Field(None, ge=1)  # estimated input tokens of one request


class CheckpointsConfig(_Strict):
    """When a session's checkpoint is due, and what the gateway does then."""

    mode: CheckpointMode = "off"
    every_turns: int | None = Field(None, ge=1)  # due every N turns of the session
    above_tokens: int | None = Field(None, ge=1)  # due when a request's input exceeds T tokens
    summarizer: str | None = None  # compact: the model alias that writes summaries
    keep_last: int = Field(2, ge=1)  # compact: the last messages are never summarized
    timeout_s: float = Field(10.0, gt=0)  # compact: longest wait for a summary; then uncompacted
    summary_max_tokens: int = Field(512, ge=16)

    @model_validator(mode="after")
    def _complete(self) -> CheckpointsConfig:
        if self.mode != "off" and self.every_turns is None and self.above_tokens is None:
            raise ValueError("checkpoints need every_turns, above_tokens or both")
        if self.mode == "compact" and not self.summarizer:
            raise ValueError("compact checkpoints need a summarizer (a model alias)")
        return self


class TenantSessionsConfig(_Strict):
    limits: SessionLimitsConfig = SessionLimitsConfig()  # replaces the top-level limits, field by field
    checkpoints: CheckpointsConfig | None = None  # replaces the top-level checkpoints


class SessionsConfig(_Strict):
    enabled: bool = True  # records for requests that carry x-session-affinity or x-session-id
    idle_ttl_s: int = Field(86_400, ge=1)  # a record expires this long after its last request
    cache_s: float = Field(1.0, ge=0)  # how long a worker reuses a record it read (policy bands)
    # How long a worker may hold a session's record updates from leased requests, to fold a
    # hot session's turns into one store update (0, the default: each goes with its settle)
    update_hold_s: float = Field(0.0, ge=0, le=60)
    max_decisions: int = Field(64, ge=1)  # decision ids listed per record; older ones are counted
    max_checkpoints: int = Field(8, ge=1)
    limits: SessionLimitsConfig = SessionLimitsConfig()
    checkpoints: CheckpointsConfig = CheckpointsConfig()
    workflows: dict[str, CheckpointsConfig] = {}  # x-workflow -> its checkpoints, over the tenant's
