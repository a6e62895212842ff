"""An upstream together with how it is tried (its pool and attempt policy), built from config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.config import GatewayConfig, OpenAICompatUpstream, UpstreamConfig
from gateway.ports import Upstream
from gateway.routing.circuit import BreakerSettings
from gateway.routing.pool import PoolSettings, ReplicaPool
from gateway.routing.probes import ProbeTarget
from gateway.routing.retry import AttemptPolicy

POOL_PROBE_INTERVAL_S = 5.0  # active probes of a pool of replicas when the config leaves it unset


@dataclass(frozen=True, slots=True)
class UpstreamRoute:
    upstream: Upstream
    pool: ReplicaPool
    policy: AttemptPolicy
    probe_interval_s: float  # 0: no active probes
    probe_timeout_s: float


def build_routes(config: GatewayConfig, upstreams: Mapping[str, Upstream]) -> dict[str, UpstreamRoute]:
    """One route per configured upstream; the pools are fresh (all circuits closed, nothing in flight)."""
    return {name: _route(spec, upstreams[name]) for name, spec in config.upstreams.items()}


def probe_targets(routes: Mapping[str, UpstreamRoute]) -> list[ProbeTarget]:
    return [
        ProbeTarget(route.upstream, route.pool, route.probe_interval_s, route.probe_timeout_s)
        for route in routes.values()
        if route.probe_interval_s > 0
    ]


def _route(spec: UpstreamConfig, upstream: Upstream) -> UpstreamRoute:
    health = spec.health
    breaker = BreakerSettings(
        health.failure_threshold, health.cooldown_s, health.max_cooldown_s, health.probe_failures
    )
    pool_settings = PoolSettings(breaker=breaker, busy_grace_s=health.busy_grace_s)
    if isinstance(spec, OpenAICompatUpstream):
        pool_settings = PoolSettings(
            balance=spec.balance,
            bounded_load_factor=spec.bounded_load_factor,
            min_load_bound=spec.min_load_bound,
            breaker=breaker,
            busy_grace_s=health.busy_grace_s,
        )
    probe_interval = health.probe_interval_s
    if probe_interval is None:
        probe_interval = POOL_PROBE_INTERVAL_S if len(upstream.replicas) > 1 else 0.0
    return UpstreamRoute(
        upstream=upstream,
        pool=ReplicaPool(upstream.replicas, pool_settings),
        policy=AttemptPolicy(
            retries=spec.retries,
            max_retry_wait_s=spec.max_retry_wait_s,
            first_byte_s=spec.timeouts.first_byte_s,
            first_byte_per_1k_tokens_s=spec.timeouts.first_byte_per_1k_tokens_s,
            response_headers_s=spec.timeouts.response_headers_s,
        ),
        probe_interval_s=probe_interval,
        probe_timeout_s=health.probe_timeout_s,
    )
