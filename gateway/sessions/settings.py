"""Session settings for one request: config (top level, tenant, key, workflow) under the
policy decision's `session` object, which has the last word field by field."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.exchange import Principal
from gateway.keys import key_id
from gateway.metering.prices import PER_MILLION
from gateway.sessions.config import SessionLimitsConfig
from gateway.sessions.rules import SessionLimits, SessionRules


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    mode: str  # "advise" or "compact"
    every_turns: int | None
    above_tokens: int | None
    summarizer: str | None
    keep_last: int
    timeout_s: float
    summary_max_tokens: int


class SessionSettings:
    def __init__(self, config: GatewayConfig) -> None:
        sessions = config.sessions
        self.idle_s = sessions.idle_ttl_s
        self.cache_s = sessions.cache_s
        self.max_decisions = sessions.max_decisions
        self.max_checkpoints = sessions.max_checkpoints
        self._tenant_limits = {
            name: _merged(sessions.limits, tenant.sessions.limits) for name, tenant in config.tenants.items()
        }
        self._key_limits = {
            key_id(key.hash): _merged(self._tenant_limits[key.tenant], key.session_limits)
            for key in config.keys
            if key.session_limits is not None
        }
        self._tenant_checkpoints = {
            name: tenant.sessions.checkpoints or sessions.checkpoints
            for name, tenant in config.tenants.items()
        }
        self._default_checkpoints = sessions.checkpoints
        self._workflows = dict(sessions.workflows)

    def limits(self, principal: Principal, rules: SessionRules) -> SessionLimits:
        configured = self._key_limits.get(principal.key_id) or self._tenant_limits.get(principal.tenant.name)
        base = _limits(configured) if configured is not None else SessionLimits()
        return SessionLimits(
            rules.max_tokens if rules.max_tokens is not None else base.max_tokens,
            rules.max_micros if rules.max_micros is not None else base.max_micros,
            rules.max_input_tokens if rules.max_input_tokens is not None else base.max_input_tokens,
        )

    def checkpoints(self, principal: Principal, workflow: str, rules: SessionRules) -> CheckpointPlan | None:
        """The request's checkpoint plan; None when checkpoints are off for it."""
        config = self._workflows.get(workflow) or self._tenant_checkpoints.get(
            principal.tenant.name, self._default_checkpoints
        )
        mode = rules.checkpoint_mode or config.mode
        every = rules.every_turns if rules.every_turns is not None else config.every_turns
        above = rules.above_tokens if rules.above_tokens is not None else config.above_tokens
        if mode == "off" or (every is None and above is None):
            return None
        summarizer = config.summarizer or self._any_summarizer()
        if mode == "compact" and summarizer is None:
            mode = "advise"  # a policy asked for compaction where no summarizer is configured
        return CheckpointPlan(
            mode, every, above, summarizer, config.keep_last, config.timeout_s, config.summary_max_tokens
        )

    def _any_summarizer(self) -> str | None:
        return self._default_checkpoints.summarizer


def _merged(base: SessionLimitsConfig, over: SessionLimitsConfig) -> SessionLimitsConfig:
    return base.model_copy(update=over.model_dump(exclude_none=True))


def _limits(config: SessionLimitsConfig) -> SessionLimits:
    micros = round(config.max_usd * PER_MILLION) if config.max_usd is not None else None
    return SessionLimits(config.max_tokens, micros, config.max_input_tokens)
