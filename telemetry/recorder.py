"""The metrics finisher: every request-driven metric, recorded once from the finished Exchange.

One pass over what the stages, the forwarder and the guards wrote on the exchange; each
measurement is a dict look-up and an addition (`registry.py`), so a request costs a few
microseconds here whatever happened to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from gateway.exchange import Attempt, Endpoint, Exchange
from gateway.metering.prices import PriceBook
from gateway.ports import Upstream
from telemetry.instruments import Instruments
from telemetry.labels import PromptFamilyNames, WorkflowLabels, prompt_family, turn_bucket

SUCCESS = "success"
OTHER_MODEL = "other"  # a model name the config does not know: a client's text, never a label
_CANCELLED = "cancelled"  # an attempt abandoned before it ended (the client left, the deadline passed)


class MetricsRecorder:
    name = "metrics"

    def __init__(
        self,
        instruments: Instruments,
        workflows: WorkflowLabels,
        upstreams: Mapping[str, Upstream],
        prices: PriceBook,
        family_buckets: int,
        aliases: frozenset[str],
        families: PromptFamilyNames | None = None,
    ) -> None:
        self._m = instruments
        self._aliases = aliases
        self._workflows = workflows
        self._prices = prices
        self._family_buckets = family_buckets
        self._families = families or PromptFamilyNames({})
        # The running upstreams (a config reload changes them in place), and of each the
        # (provider, host) labels: the host is the first replica's (all serve one model).
        self._running = upstreams
        self._upstreams = {name: _described(u) for name, u in upstreams.items()}

    def _described(self, name: str) -> tuple[str, str]:
        found = self._upstreams.get(name)
        upstream = self._running.get(name)
        if found is None or found[0] is not upstream:  # added or rebuilt by a config reload
            if upstream is None:
                return "", ""
            found = self._upstreams[name] = _described(upstream)
        return found[1], found[2]

    async def finish(self, exchange: Exchange) -> None:
        self.record(exchange)

    def record(self, exchange: Exchange) -> None:
        m = self._m
        operation = exchange.endpoint.operation
        alias = exchange.model_alias
        if alias and alias not in self._aliases:
            alias = OTHER_MODEL
        workflow = self._workflows.of(exchange)
        trace = exchange.trace
        exemplar = trace.trace_id if trace.sampled else None
        completed = exchange.completed_at if exchange.completed_at is not None else exchange.received_at
        m.request_duration.observe(
            (workflow, alias, operation, exchange.error_code or "", exchange.api),
            completed - exchange.received_at,
            exemplar,
        )
        if exchange.status == 200 and exchange.first_byte_at is not None:
            m.time_to_first_token.observe(
                (workflow, alias, "true" if exchange.stream else "false"),
                exchange.first_byte_at - exchange.received_at,
                exemplar,
            )
        served = self._attempts(exchange, operation, completed)
        principal = exchange.principal
        tenant = principal.tenant.name if principal is not None else ""
        if served is not None and exchange.usage.source is not None:
            self._usage(exchange, served, tenant, operation)
        self._governance(exchange, tenant)
        if exchange.session is not None:
            self._session(exchange, tenant, workflow, served is not None)

    def _attempts(self, exchange: Exchange, operation: str, completed: float) -> Attempt | None:
        """Records each attempt; returns the one that answered, if any."""
        m = self._m
        served: Attempt | None = None
        previous: Attempt | None = None
        for attempt in exchange.attempts:
            provider, host = self._described(attempt.upstream)
            client = (operation, provider, attempt.model, host, attempt.upstream)
            if previous is None:
                kind = "first"
            else:
                kind = "retry" if previous.upstream == attempt.upstream else "fallback"
            previous = attempt
            if attempt.ended_at is None:
                outcome = _CANCELLED
                ended = completed
            elif attempt.error is None:
                outcome = SUCCESS
                served = attempt
                ended = attempt.ended_at
            else:
                outcome = attempt.error
                ended = attempt.ended_at
            m.attempts.add((attempt.upstream, str(attempt.replica), kind, outcome))
            if attempt is served:
                if exchange.stream:
                    # A stream's attempt succeeds at its first chunk; the operation lasts to the last.
                    m.client_time_to_first_chunk.observe(client, ended - attempt.started_at)
                    ended = completed
                m.client_duration.observe((*client, ""), ended - attempt.started_at)
            else:
                m.client_duration.observe((*client, outcome), ended - attempt.started_at)
        return served

    def _usage(self, exchange: Exchange, served: Attempt, tenant: str, operation: str) -> None:
        """Tokens and spend of the answered request; the upstream-facing usage metrics (GenAI
        token usage, prefix cache, session growth) only from usage the upstream reported."""
        m = self._m
        usage = exchange.usage
        source = "reported" if usage.reported else "counted"
        alias = exchange.model_alias
        workflow = exchange.workflow
        m.tokens.add((tenant, alias, "input", source, workflow), usage.prompt_tokens)
        if exchange.endpoint is Endpoint.CHAT:
            m.tokens.add((tenant, alias, "output", source, workflow), usage.completion_tokens)
            m.tokens.add((tenant, alias, "cache_read", source, workflow), usage.cached_tokens)
        price = self._prices.get(served.model)
        if price is not None:
            cost = price.cost_micros(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)
            m.spend.add((tenant, alias, workflow), cost / 1_000_000)
        if not usage.reported:
            return
        provider, host = self._described(served.upstream)
        client = (operation, provider, served.model, host, served.upstream)
        m.client_token_usage.observe((*client, "input"), usage.prompt_tokens)
        if exchange.endpoint is Endpoint.CHAT:
            m.client_token_usage.observe((*client, "output"), usage.completion_tokens)
            family = self._families.name(exchange) or prompt_family(
                exchange.session_key, self._family_buckets
            )
            m.prompt_cache_tokens.add((served.upstream, family, "input"), usage.prompt_tokens)
            m.prompt_cache_tokens.add((served.upstream, family, "cache_read"), usage.cached_tokens)
            turn = turn_bucket(exchange.body)
            if turn is not None:
                m.session_turn_tokens.observe((alias, turn), usage.prompt_tokens)

    def _session(self, exchange: Exchange, tenant: str, workflow: str, served: bool) -> None:
        m, ticket = self._m, exchange.session
        assert ticket is not None
        if served and ticket.record is not None and ticket.record.turns > 1:
            m.session_growth.observe((workflow,), max(0.0, ticket.record.growth_slope))
        if ticket.checkpoint is not None:
            m.session_checkpoints.add((tenant, "summarized"))
        elif ticket.due:
            m.session_checkpoints.add((tenant, "advised"))
        if ticket.summary_failed:
            m.session_checkpoints.add((tenant, "summary_failed"))
        if ticket.compacted:
            m.session_checkpoints.add((tenant, "compacted"))

    def _governance(self, exchange: Exchange, tenant: str) -> None:
        m = self._m
        decision = exchange.decision
        if decision is not None:
            m.decisions.add((tenant, "allow" if decision.allow else "deny"))
        elif exchange.error_code == "policy_unavailable":
            m.decisions.add((tenant, "unavailable"))
        if exchange.tool_calls_blocked:
            m.tool_calls_blocked.add((tenant, "response"), exchange.tool_calls_blocked)
        if exchange.error_code == "tool_not_allowed":
            m.tool_calls_blocked.add((tenant, "request"))
        redaction = exchange.redaction
        if redaction is not None and redaction.found:
            for entity, count in redaction.found.items():
                m.redactions.add((tenant, entity), count)


def _described(upstream: Upstream) -> tuple[Upstream, str, str]:
    return upstream, upstream.provider, urlsplit(upstream.replicas[0]).hostname or upstream.address
