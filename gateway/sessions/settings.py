"""Session settings for one request: config (top level, tenant, key, workflow) under the
policy decision's `session` object, which has the last word field by field."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.exchange import Principal
from gateway.keys import key_id
from gateway.metering.prices import PER_MILLION
from gateway.sessions.config import SessionLimitsConfig
from gateway.sessions.rules import NO_LIMITS, SessionLimits, SessionRules

_MAX_PLANS = 1024


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
        # What a request gets when its decision sets nothing: settled once, not per request.
        self._tenant_base = {name: _limits(c) for name, c in self._tenant_limits.items()}
        self._key_base = {key: _limits(c) for key, c in self._key_limits.items()}
        self._tenant_checkpoints = {
            name: tenant.sessions.checkpoints or sessions.checkpoints
            for name, tenant in config.tenants.items()
        }
        self._default_checkpoints = sessions.checkpoints
        self._workflows = dict(sessions.workflows)
        # (key id, tenant, workflow, id of the decision's rules) -> (those rules, limits, plan):
        # keys, tenants and workflows are bounded (configured, "other", "default"), and
        # decisions are cached, so the same rules object comes back request after request.
        # Kept by identity (the entry holds the rules, so the id is not reused while it is
        # there): no hash of the rules per request.
        self._settled: dict[
            tuple[str, str, str, int], tuple[SessionRules, SessionLimits, CheckpointPlan | None]
        ] = {}

    def for_request(
        self, principal: Principal, workflow: str, rules: SessionRules
    ) -> tuple[SessionLimits, CheckpointPlan | None]:
        """The request's limits and checkpoint plan (`limits`, `checkpoints`), kept by key,
        workflow and the decision's rules object."""
        key = (principal.key_id, principal.tenant.name, workflow, id(rules))
        found = self._settled.get(key)
        if found is not None and found[0] is rules:
            return found[1], found[2]
        if len(self._settled) >= _MAX_PLANS:  # a policy whose rules never repeat
            self._settled.clear()
        limits = self.limits(principal, rules)
        plan = self.checkpoints(principal, workflow, rules)
        self._settled[key] = (rules, limits, plan)
        return limits, plan

    def limits(self, principal: Principal, rules: SessionRules) -> SessionLimits:
        base = self._key_base.get(principal.key_id)
        if base is None:
            base = self._tenant_base.get(principal.tenant.name, NO_LIMITS)
        if rules.max_tokens is None and rules.max_micros is None and rules.max_input_tokens is None:
            return base
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
