"""The upstream section of /readyz: each upstream up or down, and each replica's state.

Replicas are named by their index in the configured `replicas` list, never by address: the
page is unauthenticated, and internal host names are not for every caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway.ports import Health
from gateway.routing.upstream_route import UpstreamRoute

# The longest a readiness check waits for a replica: orchestrators give /readyz a few seconds.
READY_CHECK_S = 2.0


async def upstream_readiness(routes: Mapping[str, UpstreamRoute]) -> dict[str, Any]:
    """Checks every replica now (each within its probe timeout, at most READY_CHECK_S). An upstream is up
    when any replica answers its health check; the replicas show that answer beside what the
    pool knows (circuit, requests in flight, the last background probe)."""
    names = list(routes)
    checks = await asyncio.gather(*(_check(routes[name]) for name in names))
    upstreams: dict[str, str] = {}
    replicas: dict[str, list[dict[str, Any]]] = {}
    for name, health in zip(names, checks, strict=True):
        upstreams[name] = "up" if Health.UP in health else "down"
        replicas[name] = [
            {
                "replica": index,
                "health": answer.value,
                "circuit": status.circuit.value,
                "in_flight": status.in_flight,
                "last_probe": status.probe.value if status.probe is not None else None,
            }
            for index, (answer, status) in enumerate(zip(health, routes[name].pool.status(), strict=True))
        ]
    return {"upstreams": upstreams, "replicas": replicas}


async def _check(route: UpstreamRoute) -> list[Health]:
    upstream = route.upstream
    timeout = min(route.probe_timeout_s, READY_CHECK_S)
    answers = await asyncio.gather(
        *(upstream.check_health(i, timeout) for i in range(len(upstream.replicas))),
        return_exceptions=True,
    )
    return [answer if isinstance(answer, Health) else Health.DOWN for answer in answers]
