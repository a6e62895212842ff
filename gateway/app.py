"""The composition root: config in, a running ASGI application out.

The only module of the core that knows the adapters. It builds them inside the server's
lifespan (so their connection pools belong to the worker's event loop) and assembles the
pipeline: the ordered list of stages is here, readable top to bottom.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from adapters.audit import build_audit_writer
from adapters.policy import open_policy_engine
from adapters.responses import build_response_store
from adapters.state import build_key_store, build_state_store, warn_if_not_durable
from adapters.state.jobs import build_job_store
from adapters.upstream import build_upstream
from adapters.webhooks.http_sender import HttpWebhookSender
from gateway.access_log import AccessLog
from gateway.admin_auth import AdminCredentials
from gateway.audit.completion import AuditCompletion
from gateway.audit.queued_sink import QueuedSink
from gateway.config import (
    GatewayConfig,
    PolicyConfig,
    StateConfig,
    config_path_from_env,
    load_config,
    metrics_dir_from_env,
)
from gateway.config_reload import ConfigReloader
from gateway.doors.messages import MessagesDoor
from gateway.doors.registry import Doors, build_doors
from gateway.doors.response_store import ResponseRecords
from gateway.doors.responses import ResponsesDoor
from gateway.doors.routes import DoorRoutes
from gateway.exchange import Principal, Tenant
from gateway.forward import Forwarder
from gateway.guards import ResponseGuard, UsageGuard
from gateway.http import GatewayASGI, Services
from gateway.jobs.parts import Jobs
from gateway.keys import KeyRing, key_id
from gateway.keystore.admin import KeysAdmin
from gateway.keystore.lookup import KeyLookup
from gateway.keystore.parts import LiveKeys, open_live_keys
from gateway.metering.counted import CountedUsage
from gateway.metering.idempotency import IdempotencyOnly
from gateway.metering.parts import MeteringParts, metering_parts, replanned, state_config
from gateway.metering.prices import PriceBook
from gateway.metering.produced import ProducedText
from gateway.pipeline import Finisher, Pipeline, Stage
from gateway.policy.cache import DecisionCache
from gateway.ports import AuditSink, PolicyEngine, StateStore
from gateway.redaction.guard import RedactionGuard
from gateway.redaction.settings import RedactionSettings, scrubber_for
from gateway.redaction.state import RedactionCounters
from gateway.request_ids import UpstreamIds
from gateway.routing.choice import LatencyBoard
from gateway.routing.context_windows import context_windows
from gateway.routing.live_upstreams import LiveUpstreams
from gateway.routing.mirror import Mirror
from gateway.routing.readiness import upstream_readiness
from gateway.routing.tables import candidates_from, live_choices, mirror_from
from gateway.sessions.parts import (
    SessionParts,
    bind_summaries,
    close_sessions,
    session_parts,
    trace_summaries,
)
from gateway.sessions.summarizer import InternalAdmit
from gateway.sessions.views import SessionViews
from gateway.stages.admit import Admit
from gateway.stages.decide import Decide
from gateway.stages.label import Label
from gateway.stages.redact import Redact
from gateway.stages.route import Route
from gateway.tools.context_cap import ContextCap
from gateway.tools.image_urls import ImageDestinations
from gateway.tools.offer import ToolOffer
from gateway.tools.response_guard import ToolCallGuard
from telemetry.setup import build_telemetry


def tenants_from(config: GatewayConfig) -> dict[str, Tenant]:
    return {
        name: Tenant(name, None if "*" in t.models else frozenset(t.models))
        for name, t in config.tenants.items()
    }


def keyring_from(config: GatewayConfig, tenants: dict[str, Tenant]) -> KeyRing:
    return KeyRing(
        (
            key.hash,
            Principal(tenants[key.tenant], key_id(key.hash), key.label, key.workflow, key.priority),
        )
        for key in config.keys
    )


def idempotency_only(config: GatewayConfig) -> IdempotencyOnly:
    """Without metering, Idempotency-Key is still honoured, on the embedded store."""
    embedded = StateConfig()
    return IdempotencyOnly(
        lambda: build_state_store(embedded), config.metering.idempotency_ttl_s, embedded.lease_s
    )


async def live_keys_from(
    config: GatewayConfig, tenants: dict[str, Tenant], audit: AuditSink | None
) -> LiveKeys | None:
    """Keys in the state store beside the config's, when `live_keys` is configured."""
    state = state_config(config)
    if config.live_keys is None or state is None:
        return None
    return await open_live_keys(config, build_key_store(state), tenants, audit)


def audit_sink_from(config: GatewayConfig) -> AuditSink | None:
    """The decision log, or None when the config has no `audit` block."""
    audit = config.audit
    if audit is None:
        return None
    return QueuedSink(
        build_audit_writer(audit),
        queue_size=audit.queue_size,
        mandatory=audit.mandatory,
        write_timeout_s=audit.write_timeout_s,
        flush_interval_s=audit.flush_interval_ms / 1000,
        prepare=scrubber_for(config).record,  # the scrubber of everything persisted, logs included
    )


def decide_from(
    policy: PolicyConfig,
    engine: PolicyEngine,
    config: GatewayConfig,
    audit: AuditSink | None,
    budget_band: Callable[[Principal], Awaitable[str]] | None = None,
    throttled_for: Callable[[], float] | None = None,
) -> Decide:
    cache = policy.cache
    return Decide(
        engine,
        {alias: [c.upstream for c in candidates] for alias, candidates in config.models.items()},
        cache=DecisionCache(cache.max_entries, cache.ttl_s) if cache.enabled else None,
        audit=audit,
        timeout_s=policy.timeout_ms / 1000,
        budget_band=budget_band,
        throttled_for=throttled_for,
    )


@dataclass(frozen=True, slots=True)
class DoorParts:
    """The client APIs (gateway/doors), their routes beside the model calls, and the closing
    of the responses store."""

    doors: Doors
    routes: DoorRoutes
    aclose: Callable[[], Awaitable[None]]


def door_parts_from(
    config: GatewayConfig,
    authenticate: Callable[[str | None], Principal],
    models_for: Callable[[Principal], list[str]],
) -> DoorParts:
    store = build_response_store(config.responses)
    scrub = scrubber_for(config).record
    records = ResponseRecords(store, config.responses.retention_s, scrub) if store is not None else None
    doors = build_doors(records, scrub)
    routes = DoorRoutes(
        authenticate,
        models_for,
        doors.find(ResponsesDoor),
        doors.find(MessagesDoor),
    )
    return DoorParts(doors, routes, records.aclose if records is not None else _nothing)


async def _nothing() -> None:
    return None


def _in_turn(*steps: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        for step in steps:
            await step()

    return run


def sessions_from(
    config: GatewayConfig, metering: MeteringParts | None, upstream_ids: Callable[[str], str]
) -> SessionParts | None:
    """Sessions, on metering's store (their records ride on its settle), else on the embedded
    one (opened on the first session request); None when `sessions.enabled` is false."""
    if not config.sessions.enabled:
        return None
    if metering is not None:
        store = metering.store
        return session_parts(config, lambda: store, True, upstream_ids)
    state = config.state or StateConfig()
    return session_parts(config, lambda: build_state_store(state), False, upstream_ids)


def _store_of(sessions: SessionParts | None) -> Callable[[], StateStore | None] | None:
    return sessions.store.opened if sessions is not None else None


# The composition root names every part, in order, in one place: long by design.
def build_services(  # noqa: PLR0915
    config: GatewayConfig, redaction: RedactionSettings | None = None, config_path: str | None = None
) -> Callable[[], Awaitable[Services]]:
    """`redaction` replaces the settings compiled from config (tests inject a failing detector);
    `config_path`: the file the config came from, watched for edits (gateway/config_reload.py)."""

    async def build() -> Services:  # noqa: PLR0915
        # First: a policy that cannot be loaded stops the start before anything else is opened.
        engine = await open_policy_engine(config.policy) if config.policy is not None else None
        audit = audit_sink_from(config)
        live = await live_keys_from(config, tenants_from(config), audit)
        # The longest a request may use an upstream a config edit replaced, before it is closed.
        live_upstreams = LiveUpstreams(config, build_upstream, config.server.request_timeout_s + 5)
        upstreams, routes = live_upstreams.upstreams, live_upstreams.routes  # changed in place by edits
        state = state_config(config)
        metering = metering_parts(config, state, build_state_store(state)) if state is not None else None
        if metering is not None:
            await warn_if_not_durable(metering.store)
        redaction_counters = RedactionCounters()
        keys_only = None if metering else idempotency_only(config)
        upstream_ids = UpstreamIds(key.encode() if (key := config.server.request_id_key) else None)
        sessions = sessions_from(config, metering, upstream_ids)
        latency_board = LatencyBoard()
        # Side-by-side runs and mirrors: their aliases and upstreams change only with a restart.
        mirror = mirror_from(config, routes, audit, metering.store if metering else None)
        # The gateway's count of usage the upstream did not report first, then settle, so the
        # access log and the audit record see the settled request.
        finishers: list[Finisher] = [
            CountedUsage(),
            *([metering.settle] if metering else [keys_only] if keys_only else []),
            *([sessions.recorder] if sessions is not None else []),
            *([AccessLog()] if config.server.access_log else []),
            *([AuditCompletion(audit)] if audit else []),
            *([latency_board] if config.routing.choose else []),
            *([mirror] if mirror else []),
            # Async jobs (docs/async.md; nothing without a `jobs:` block): an upstream's
            # throttling, seen by any request, pauses pulling them.
            *(jobs := Jobs(config, build_job_store)).finishers,
        ]
        # Redaction before the tool-call guard: restored arguments are what get checked.
        redaction_guard = RedactionGuard(redaction_counters)
        guards: list[ResponseGuard] = [
            ProducedText(),
            redaction_guard,
            ToolCallGuard(),
            UsageGuard(),
        ]
        reloader = _reloader(config, config_path, lambda edited: reload_into(services, edited, lasting))
        telemetry = build_telemetry(
            config,
            upstreams=upstreams,
            routes=routes,
            scrub=scrubber_for(config).text,
            store=metering.store if metering is not None else None,
            audit=audit,
            metrics_dir=metrics_dir_from_env(),
            policy_queue=engine.evaluation_queue() if engine is not None else None,
            live_keys_age=live.cache.age_s if live is not None else None,
            config_edits=reloader.counts.by_outcome if reloader is not None else None,
            jobs=jobs.metrics_source,
            sessions=_store_of(sessions),
        )
        finishers.extend(telemetry.finishers)  # last: metrics record what the others settled
        if mirror is not None and telemetry.arms is not None:
            mirror.listeners.append(telemetry.arms)
        lasting = Lasting(
            engine=engine,
            audit=audit,
            live=live,
            metering=metering,
            state=state,
            keys_only=keys_only,
            upstreams=live_upstreams,
            latency_board=latency_board,
            mirror=mirror,
            guards=tuple(guards),
            finishers=tuple(finishers),
            redaction_guard=redaction_guard,
            redaction_counters=redaction_counters,
            redaction=redaction,
            sessions=sessions,
            throttled_for=jobs.throttled_for,
            # keys and aliases are read through the services, where a config edit swaps them
            doors=door_parts_from(
                config,
                lambda header: services.authenticate(header),  # noqa: PLW0108
                lambda principal: services.models_for(principal),  # noqa: PLW0108
            ),
        )
        trace_summaries(sessions, telemetry.tracer)
        assembled = assemble(config, lasting)
        background: list[asyncio.Task[None]] = []

        async def close() -> None:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await telemetry.aclose()  # first: its last export still reads the state store (budgets)
            if mirror is not None:
                await mirror.aclose()
            await live_upstreams.aclose()
            if audit is not None:
                await audit.aclose()
            if engine is not None:
                await engine.aclose()
            if metering is not None:
                await metering.aclose()
            if keys_only is not None:
                await keys_only.aclose()
            if live is not None:
                await live.aclose()
            await close_sessions(sessions)

        live_upstreams.start()  # last: a start that failed above leaves no background task behind
        if live is not None:
            live.start()
        if reloader is not None:
            background.append(asyncio.get_running_loop().create_task(reloader.run(), name="tollgate-config"))
        telemetry.metrics.start()
        # Jobs take the pipeline and the keys in force when they run: a config edit swaps them.
        jobs_api = jobs.assemble(
            lambda: services.pipeline,
            metering is not None,
            lambda authorization: services.authenticate(authorization),  # noqa: PLW0108 (late-bound)
            telemetry.tracer,
            HttpWebhookSender(allow_private=config.jobs is not None and config.jobs.webhook_allow_private),
            lasting.doors.doors,  # the doors translate the jobs that came through them
        )
        services = Services(
            pipeline=assembled.pipeline,
            authenticate=assembled.admit.authenticate,
            models_for=assembled.models_for,
            upstream_health=lambda: upstream_readiness(routes),
            max_body_bytes=config.server.max_body_bytes,
            request_timeout_s=config.server.request_timeout_s,
            close=jobs.closing(_in_turn(close, lasting.doors.aclose)),  # the responses store last
            admin_spend=assembled.admin_spend,
            tracer=telemetry.tracer,
            metrics=telemetry.metrics.page if config.telemetry.metrics.prometheus else None,
            upstream_ids=upstream_ids,
            policy_readiness=(engine.name, engine.readiness) if engine is not None else None,
            doors=lasting.doors.doors,
            door_routes=lasting.doors.routes.with_jobs(jobs_api),  # background responses' state
            admin_keys=assembled.admin_keys,
            jobs=jobs_api,
            attach_load=jobs.attach_load,  # after `assemble`, above
            sessions=assembled.sessions,
        )
        return services

    return build


@dataclass(frozen=True, slots=True)
class Lasting:
    """The parts that live as long as the process: a config edit rebuilds the stages around them."""

    engine: PolicyEngine | None
    audit: AuditSink | None
    live: LiveKeys | None
    metering: MeteringParts | None
    state: StateConfig | None
    keys_only: IdempotencyOnly | None
    upstreams: LiveUpstreams
    latency_board: LatencyBoard
    mirror: Mirror | None
    guards: tuple[ResponseGuard, ...]
    finishers: tuple[Finisher, ...]
    redaction_guard: RedactionGuard
    redaction_counters: RedactionCounters
    redaction: RedactionSettings | None  # settings injected by a test, kept over edits
    doors: DoorParts  # the client APIs and the responses store (`responses` changes with a restart)
    sessions: SessionParts | None = None  # session records' store and cache, the summarizer
    throttled_for: Callable[[], float] | None = None  # the policy input's `capacity` (jobs' pull gate)


@dataclass(frozen=True, slots=True)
class Assembled:
    """What one config gives the edge: the pipeline, the parts of it /v1/models and
    /admin/spend use, and /admin/keys with the config's operator credentials."""

    pipeline: Pipeline
    admit: Admit
    route: Route
    metering: MeteringParts | None
    admin_keys: KeysAdmin | None
    sessions: SessionViews | None = None  # GET /v1/sessions/{id}, /admin/sessions

    def models_for(self, principal: Principal) -> list[str]:
        return self.route.aliases_for(principal.tenant.models)

    @property
    def admin_spend(self) -> Callable[[str | None, str], Awaitable[bytes]] | None:
        metering = self.metering
        return metering.admin.spend if metering is not None and metering.admin is not None else None


def assemble(config: GatewayConfig, lasting: Lasting) -> Assembled:
    """The request's stages, in order, from what a config edit may change (keys, tenants,
    budgets, rate limits, model aliases, redaction)."""
    tenants = tenants_from(config)
    keyring = keyring_from(config, tenants)
    live = lasting.live
    if live is not None:
        live.cache.retarget(tenants)
    admit = Admit(KeyLookup(keyring, live.cache) if live is not None else keyring)
    route = Route(
        candidates_from(config),
        live_choices(config, lasting.latency_board, PriceBook.from_config(config.prices)),
    )
    metering, state, engine = lasting.metering, lasting.state, lasting.engine
    metered = replanned(metering, config, state) if metering is not None and state is not None else None
    band = metered.bands.band if metered is not None else None
    decide = (
        [decide_from(config.policy, engine, config, lasting.audit, band, lasting.throttled_for)]
        if config.policy and engine
        else []
    )
    redact = Redact(lasting.redaction or RedactionSettings.from_config(config), lasting.redaction_counters)
    keys_only = lasting.keys_only
    meter: list[Stage] = [metered.meter] if metered else [keys_only] if keys_only else []
    mirror = lasting.mirror
    sessions = lasting.sessions
    opened = sessions.stages(config) if sessions is not None else None
    request_side: list[Stage] = [redact, ToolOffer(), ImageDestinations(), ContextCap()]
    windows = context_windows(config.context_windows, (c.model for cs in config.models.values() for c in cs))
    # route before meter: the reservation is priced on the candidates the request will
    # actually be tried on (the alias a policy moved it to, the class it named).
    stages: list[Stage] = [
        admit,
        Label(config.workflow_names),
        *([opened.open] if opened is not None else []),
        *decide,
        *request_side,
        *([opened.check] if opened is not None else []),
        route,
        *windows,
        *meter,
        *([mirror] if mirror else []),  # last: the shadow gets the body every stage has seen
    ]
    forwarder = Forwarder(lasting.upstreams.routes)
    pipeline = Pipeline(
        stages, forwarder, lasting.guards, lasting.finishers, error_guards=[lasting.redaction_guard]
    )
    # Summaries of compact checkpoints: the same stages, for the session's own principal.
    summary_stages: list[Stage] = [InternalAdmit(), *decide, *request_side, route, *windows, *meter]
    bind_summaries(
        sessions,
        Pipeline(
            summary_stages,
            forwarder,
            lasting.guards,
            lasting.finishers,
            error_guards=[lasting.redaction_guard],
        ),
    )
    views = (
        sessions.views(
            admit.authenticate,
            AdminCredentials(config.admin.tokens).authorize if config.admin is not None else None,
            list(config.tenants),
        )
        if sessions is not None
        else None
    )
    keys_admin = live.admin(config) if live is not None else None
    return Assembled(pipeline, admit, route, metered, keys_admin, views)


def reload_into(services: Services, edited: GatewayConfig, lasting: Lasting) -> None:
    """An edited config: its upstreams (new or changed ones built, the others kept), then the
    stages built on them, swapped in."""
    lasting.upstreams.update(edited)
    swap_in(services, assemble(edited, lasting))


def swap_in(services: Services, edited: Assembled) -> None:
    """An edited config's stages: a request takes the pipeline once, when it starts."""
    services.pipeline = edited.pipeline
    services.authenticate = edited.admit.authenticate
    services.models_for = edited.models_for
    services.admin_spend = edited.admin_spend
    services.admin_keys = edited.admin_keys
    services.sessions = edited.sessions


def _reloader(
    config: GatewayConfig, path: str | None, apply: Callable[[GatewayConfig], None]
) -> ConfigReloader | None:
    interval = config.server.config_reload_interval_s
    if path is None or interval <= 0:
        return None
    return ConfigReloader(path, config, apply, interval)


def create_app(
    config: GatewayConfig | None = None,
    redaction: RedactionSettings | None = None,
    config_path: str | None = None,
) -> GatewayASGI:
    """ASGI application factory; without a config it loads the file named by TOLLGATE_CONFIG.
    The file the config came from (`config_path`, or that one) is watched for edits."""
    if config is None:
        config_path = config_path_from_env()
        config = load_config(config_path)
    return GatewayASGI(build_services(config, redaction, config_path))
