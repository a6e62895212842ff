"""Async jobs' parts, built from config around one job store, for the composition root."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.config import GatewayConfig, JobsConfig
from gateway.exchange import Principal
from gateway.forward import Forwarder
from gateway.jobs.api import JobsApi
from gateway.jobs.counters import JobCounters
from gateway.jobs.pull_gate import PullGate, SyncLoad
from gateway.jobs.runner import JobRunner, RunnerSettings
from gateway.jobs.snapshot import Thawing
from gateway.jobs.store import JobStore
from gateway.jobs.submit import Submitter
from gateway.jobs.webhooks import Webhooks
from gateway.metering.plan import MeterPlans
from gateway.pipeline import Pipeline
from gateway.ports import WebhookSender
from gateway.redaction.settings import RedactionSettings
from gateway.tracing import Tracer


def pull_gate(jobs: JobsConfig) -> PullGate:
    return PullGate(jobs.pull_while_sync_below, jobs.throttle_pause_s, jobs.yield_to_sync)


@dataclass(frozen=True, slots=True)
class JobsBase:
    """What exists before the pipeline: the store, the pull gate (its finisher watches for
    throttling), and the counters telemetry reads."""

    store: JobStore
    gate: PullGate
    counters: JobCounters = field(default_factory=JobCounters)


@dataclass(frozen=True, slots=True)
class JobsParts:
    store: JobStore
    runner: JobRunner
    api: JobsApi
    gate: PullGate
    webhooks: Webhooks
    pull: bool = True  # False: this process accepts jobs, a `tollgate jobs-worker` runs them

    def start(self, load: SyncLoad) -> None:
        """Once the server runs: pulling starts, gated by its synchronous calls."""
        self.gate.attach(load)
        if self.pull:
            self.runner.start()

    async def aclose(self) -> None:
        await self.runner.aclose()
        await self.webhooks.aclose()
        await self.store.aclose()


def jobs_parts(
    config: GatewayConfig,
    base: JobsBase,
    pipeline: Pipeline,
    forwarder: Forwarder,
    principals: Mapping[str, Principal],
    metered: bool,
    redaction: RedactionSettings,
    authenticate: Callable[[str | None], Principal],
    upstream_ids: Callable[[str], str],
    tracer: Tracer,
    sender: WebhookSender,
) -> JobsParts:
    store, gate, counters = base.store, base.gate, base.counters
    jobs = config.jobs
    assert jobs is not None
    plans = MeterPlans(config) if metered else None
    thawing = Thawing(principals, plans.for_principal if plans is not None else None, redaction)
    settings = RunnerSettings(
        concurrency=jobs.concurrency,
        claim_batch=jobs.claim_batch,
        idle_poll_s=jobs.idle_poll_s,
        visibility_s=jobs.visibility_s,
        attempt_s=jobs.attempt_timeout_s or config.server.request_timeout_s,
        retry_base_s=jobs.retry_base_s,
        retry_max_s=jobs.retry_max_s,
        native_poll_s=jobs.native_poll_s,
        native_poll_max_s=jobs.native_poll_max_s,
        results_keep_s=jobs.results_keep_s,
        webhook_attempts=jobs.webhook_attempts,
    )
    hooks = Webhooks(store, sender, jobs)
    runner = JobRunner(store, pipeline, forwarder, thawing, gate, settings, tracer, hooks, counters)
    submitter = Submitter(pipeline, upstream_ids, tracer)
    api = JobsApi(store, submitter, runner, authenticate, jobs)
    return JobsParts(store, runner, api, gate, hooks, jobs.pull)
