"""Async jobs' parts, built from config around one job store, for the composition root."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.config import GatewayConfig, JobsConfig
from gateway.exchange import Principal
from gateway.jobs.api import JobsApi
from gateway.jobs.counters import JobCounters
from gateway.jobs.host_load import HostLoad
from gateway.jobs.input_files import InputFiles
from gateway.jobs.pull_gate import PullGate, SyncLoad, ThrottleWatch
from gateway.jobs.records import QueueDepth
from gateway.jobs.runner import JobRunner, RunnerSettings
from gateway.jobs.snapshot import Thawing
from gateway.jobs.store import JobStore
from gateway.jobs.submit import Submitter
from gateway.jobs.webhook_destinations import WebhookDestinations
from gateway.jobs.webhooks import Webhooks
from gateway.metering.plan import MeterPlans
from gateway.pipeline import Pipeline
from gateway.ports import WebhookSender
from gateway.redaction.settings import RedactionSettings
from gateway.request_ids import UpstreamIds
from gateway.stages.decide import Decide
from gateway.tracing import Tracer

if TYPE_CHECKING:
    from gateway.doors.registry import Doors

JobsMetrics = tuple[Callable[[], Awaitable[list[QueueDepth]]], JobCounters]


def pull_gate(jobs: JobsConfig) -> PullGate:
    return PullGate(
        jobs.pull_while_sync_below,
        jobs.throttle_pause_s,
        jobs.yield_to_sync,
        steps_per_pass=jobs.steps_per_pass,
    )


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
    host_load: HostLoad | None = None  # the host's gateway processes' synchronous calls

    def start(self, load: SyncLoad) -> None:
        """Once the server runs: pulling starts, gated by its synchronous calls and, with a
        host load file, by those of the host's other gateway processes."""
        if self.host_load is not None:
            self.host_load.attach(load, publish=True)
            self.gate.attach(self.host_load, self.host_load)
        else:
            self.gate.attach(load)
        if self.pull:
            self.runner.start()

    async def aclose(self) -> None:
        await self.runner.aclose()
        await self.webhooks.aclose()
        await self.store.aclose()
        if self.host_load is not None:
            self.host_load.close()


def jobs_parts(
    config: GatewayConfig,
    base: JobsBase,
    pipeline: Callable[[], Pipeline],
    metered: bool,
    redaction: RedactionSettings,
    authenticate: Callable[[str | None], Principal],
    upstream_ids: Callable[[str], str],
    tracer: Tracer,
    sender: WebhookSender,
    doors: Doors | None = None,
) -> JobsParts:
    store, gate, counters = base.store, base.gate, base.counters
    jobs = config.jobs
    assert jobs is not None
    plans = MeterPlans(config) if metered else None
    thawing = Thawing(plans.for_principal if plans is not None else None, redaction)
    settings = RunnerSettings(
        concurrency=jobs.concurrency,
        upstream_concurrency=jobs.upstream_concurrency or jobs.concurrency,
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
    destinations = WebhookDestinations(jobs, lambda: decide_stage(pipeline()))
    hooks = Webhooks(store, sender, jobs, destinations)
    by_api = doors.by_api if doors is not None else None
    runner = JobRunner(store, pipeline, thawing, gate, settings, tracer, hooks, counters, doors=by_api)
    submitter = Submitter(pipeline, upstream_ids, tracer)
    api = JobsApi(
        store,
        submitter,
        runner,
        authenticate,
        jobs,
        InputFiles(pipeline),
        destinations,
        door_of_job=doors.for_job if doors is not None else None,
    )
    path = jobs.host_load_path
    host_load = HostLoad(path) if path is not None else None
    return JobsParts(store, runner, api, gate, hooks, jobs.pull, host_load)


def decide_stage(pipeline: Pipeline) -> Decide | None:
    """The pipeline's policy decision stage (None without a policy block)."""
    return next((stage for stage in pipeline.stages if isinstance(stage, Decide)), None)


class Jobs:
    """Async jobs as the composition root sees them: nothing at all without a `jobs:` block.

    Made before the pipeline (its finisher watches for throttling; telemetry reads its
    counters), completed once the pipeline exists (`assemble`), started by the HTTP edge
    (`attach_load`), and closed before everything it uses (`closing`).
    """

    def __init__(self, config: GatewayConfig, store: Callable[[JobsConfig], JobStore]) -> None:
        self._config = config
        self.base = JobsBase(store(config.jobs), pull_gate(config.jobs)) if config.jobs is not None else None
        self.parts: JobsParts | None = None

    @property
    def finishers(self) -> list[ThrottleWatch]:
        return [ThrottleWatch(self.base.gate)] if self.base is not None else []

    @property
    def throttled_for(self) -> Callable[[], float] | None:
        """The pull gate's throttle pause, for the policy input's `capacity` (None without jobs)."""
        return self.base.gate.throttled_for if self.base is not None else None

    @property
    def metrics_source(self) -> JobsMetrics | None:
        return (self.base.store.depth, self.base.counters) if self.base is not None else None

    def assemble(
        self,
        pipeline: Callable[[], Pipeline],
        metered: bool,
        authenticate: Callable[[str | None], Principal],
        tracer: Tracer,
        sender: WebhookSender,
        doors: Doors | None = None,
    ) -> JobsApi | None:
        """The rest of the parts, around the pipeline in force (`pipeline()`: a config edit
        swaps it); the HTTP doors (None without jobs). `doors`: the client APIs, which
        translate the jobs that came through them."""
        if self.base is None:
            return None
        config = self._config
        key = config.server.request_id_key
        self.parts = jobs_parts(
            config,
            self.base,
            pipeline,
            metered,
            RedactionSettings.from_config(config),
            authenticate,
            UpstreamIds(key.encode() if key else None),
            tracer,
            sender,
            doors,
        )
        return self.parts.api

    @property
    def attach_load(self) -> Callable[[SyncLoad], None] | None:
        return self.parts.start if self.parts is not None else None

    def closing(self, then: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """`then`, preceded by closing the jobs: a job under way still settles through metering."""

        async def close() -> None:
            if self.parts is not None:
                await self.parts.aclose()
            await then()

        return close
