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
from adapters.state import build_state_store, warn_if_not_durable
from adapters.upstream import build_upstream
from gateway.access_log import AccessLog
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
from gateway.doors.messages import MessagesDoor
from gateway.doors.registry import Doors, build_doors
from gateway.doors.response_store import ResponseRecords
from gateway.doors.responses import ResponsesDoor
from gateway.doors.routes import DoorRoutes
from gateway.exchange import Principal, Tenant
from gateway.forward import Forwarder
from gateway.guards import ResponseGuard, UsageGuard
from gateway.http import GatewayASGI, Services
from gateway.keys import KeyRing, key_id
from gateway.metering.counted import CountedUsage
from gateway.metering.idempotency import IdempotencyOnly
from gateway.metering.parts import metering_parts, state_config
from gateway.metering.prices import PriceBook
from gateway.metering.produced import ProducedText
from gateway.pipeline import Finisher, Pipeline, Stage
from gateway.policy.cache import DecisionCache
from gateway.ports import AuditSink, PolicyEngine
from gateway.redaction.guard import RedactionGuard
from gateway.redaction.settings import RedactionSettings, scrubber_for
from gateway.redaction.state import RedactionCounters
from gateway.request_ids import UpstreamIds
from gateway.routing.choice import LatencyBoard
from gateway.routing.probes import HealthProber
from gateway.routing.readiness import upstream_readiness
from gateway.routing.tables import candidates_from, live_choices, mirror_from
from gateway.routing.upstream_route import build_routes, probe_targets
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
) -> Decide:
    cache = policy.cache
    return Decide(
        engine,
        {alias: [c.upstream for c in candidates] for alias, candidates in config.models.items()},
        cache=DecisionCache(cache.max_entries, cache.ttl_s) if cache.enabled else None,
        audit=audit,
        timeout_s=policy.timeout_ms / 1000,
        budget_band=budget_band,
    )


@dataclass(frozen=True, slots=True)
class DoorParts:
    """The client APIs (gateway/doors), their routes beside the model calls, and the closing
    of the responses store."""

    doors: Doors
    routes: DoorRoutes
    aclose: Callable[[], Awaitable[None]]


def door_parts_from(config: GatewayConfig, admit: Admit, route: Route) -> DoorParts:
    store = build_response_store(config.responses)
    records = (
        ResponseRecords(store, config.responses.retention_s, scrubber_for(config).record)
        if store is not None
        else None
    )
    doors = build_doors(records)
    routes = DoorRoutes(
        admit.authenticate,
        lambda principal: route.aliases_for(principal.tenant.models),
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


def build_services(
    config: GatewayConfig, redaction: RedactionSettings | None = None
) -> Callable[[], Awaitable[Services]]:
    """`redaction` replaces the settings compiled from config (tests inject a failing detector)."""

    async def build() -> Services:
        # First: a policy that cannot be loaded stops the start before anything else is opened.
        engine = await open_policy_engine(config.policy) if config.policy is not None else None
        tenants = tenants_from(config)
        admit = Admit(keyring_from(config, tenants))
        latency_board = LatencyBoard()
        route = Route(
            candidates_from(config),
            live_choices(config, latency_board, PriceBook.from_config(config.prices)),
        )
        upstreams = {name: build_upstream(name, spec) for name, spec in config.upstreams.items()}
        routes = build_routes(config, upstreams)
        forwarder = Forwarder(routes)
        prober = HealthProber(probe_targets(routes))
        audit = audit_sink_from(config)
        state = state_config(config)
        metering = metering_parts(config, state, build_state_store(state)) if state is not None else None
        if metering is not None:
            await warn_if_not_durable(metering.store)
        band = metering.bands.band if metering is not None else None
        decide = [decide_from(config.policy, engine, config, audit, band)] if config.policy and engine else []
        redaction_counters = RedactionCounters()
        redact = Redact(redaction or RedactionSettings.from_config(config), redaction_counters)
        # Without metering, Idempotency-Key is still honoured, on the embedded store.
        embedded = StateConfig()
        keys_only = (
            None
            if metering
            else IdempotencyOnly(
                lambda: build_state_store(embedded), config.metering.idempotency_ttl_s, embedded.lease_s
            )
        )
        meter: list[Stage] = [metering.meter] if metering else [keys_only] if keys_only else []
        mirror = mirror_from(config, routes, audit, metering.store if metering else None)
        # route before meter: the reservation is priced on the candidates the request will
        # actually be tried on (the alias a policy moved it to, the class it named).
        stages: list[Stage] = [
            admit,
            Label(config.workflow_names),
            *decide,
            redact,
            ToolOffer(),
            ImageDestinations(),
            ContextCap(),
            route,
            *meter,
            *([mirror] if mirror else []),  # last: the shadow gets the body every stage has seen
        ]
        # The gateway's count of usage the upstream did not report first, then settle, so the
        # access log and the audit record see the settled request.
        finishers: list[Finisher] = [
            CountedUsage(),
            *([metering.settle] if metering else [keys_only] if keys_only else []),
            *([AccessLog()] if config.server.access_log else []),
            *([AuditCompletion(audit)] if audit else []),
            *([latency_board] if config.routing.choose else []),
            *([mirror] if mirror else []),
        ]
        # Redaction before the tool-call guard: restored arguments are what get checked.
        redaction_guard = RedactionGuard(redaction_counters)
        guards: list[ResponseGuard] = [
            ProducedText(),
            redaction_guard,
            ToolCallGuard(),
            UsageGuard(),
        ]
        telemetry = build_telemetry(
            config,
            upstreams=upstreams,
            routes=routes,
            scrub=scrubber_for(config).text,
            store=metering.store if metering is not None else None,
            audit=audit,
            metrics_dir=metrics_dir_from_env(),
            policy_queue=engine.evaluation_queue() if engine is not None else None,
        )
        door_parts = door_parts_from(config, admit, route)
        finishers.extend(telemetry.finishers)  # last: metrics record what the others settled
        if mirror is not None and telemetry.arms is not None:
            mirror.listeners.append(telemetry.arms)
        pipeline = Pipeline(stages, forwarder, guards, finishers, error_guards=[redaction_guard])

        async def close() -> None:
            await telemetry.aclose()  # first: its last export still reads the state store (budgets)
            await prober.aclose()
            if mirror is not None:
                await mirror.aclose()
            await asyncio.gather(*(u.aclose() for u in upstreams.values()))
            if audit is not None:
                await audit.aclose()
            if engine is not None:
                await engine.aclose()
            if metering is not None:
                await metering.aclose()
            if keys_only is not None:
                await keys_only.aclose()

        prober.start()  # last: a start that failed above leaves no background task behind
        telemetry.metrics.start()
        return Services(
            pipeline=pipeline,
            authenticate=admit.authenticate,
            models_for=lambda principal: route.aliases_for(principal.tenant.models),
            upstream_health=lambda: upstream_readiness(routes),
            max_body_bytes=config.server.max_body_bytes,
            request_timeout_s=config.server.request_timeout_s,
            close=_in_turn(close, door_parts.aclose),  # the responses store last
            admin_spend=metering.admin.spend if metering and metering.admin else None,
            tracer=telemetry.tracer,
            metrics=telemetry.metrics.page if config.telemetry.metrics.prometheus else None,
            upstream_ids=UpstreamIds(key.encode() if (key := config.server.request_id_key) else None),
            policy_readiness=(engine.name, engine.readiness) if engine is not None else None,
            doors=door_parts.doors,
            door_routes=door_parts.routes,
        )

    return build


def create_app(
    config: GatewayConfig | None = None, redaction: RedactionSettings | None = None
) -> GatewayASGI:
    """ASGI application factory; without a config it loads the file named by TOLLGATE_CONFIG."""
    if config is None:
        config = load_config(config_path_from_env())
    return GatewayASGI(build_services(config, redaction))
