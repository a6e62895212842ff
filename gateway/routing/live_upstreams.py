"""The running upstreams, their routes (pools, circuits) and health probes, and what a config
edit does to them.

An upstream whose settings the edit leaves as they were is kept whole: its connections, its
replicas' circuits and load, its probes. One that is new or changed is built afresh; one
that is gone or replaced is retired: its probes stop at once, and its client is closed once
every request that may still use it has reached its deadline (`retire_after_s`, the longest
a request may run), since requests in flight finish on the pipeline they started with.
`routes` is changed in place, so readiness and the circuit metrics always read the current
set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from gateway.config import GatewayConfig, UpstreamConfig
from gateway.ports import Upstream
from gateway.routing.probes import HealthProber
from gateway.routing.upstream_route import UpstreamRoute, build_routes, probe_targets


class LiveUpstreams:
    def __init__(
        self, config: GatewayConfig, build: Callable[[str, UpstreamConfig], Upstream], retire_after_s: float
    ) -> None:
        self._build = build
        self._retire_after_s = retire_after_s
        self._specs = dict(config.upstreams)
        self.upstreams: dict[str, Upstream] = {name: build(name, spec) for name, spec in self._specs.items()}
        self.routes: dict[str, UpstreamRoute] = build_routes(config, self.upstreams)
        self._prober = HealthProber(probe_targets(self.routes))
        self._retired: list[Upstream] = []  # not closed yet: requests may still use them
        self._retiring: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._prober.start()

    def update(self, config: GatewayConfig) -> list[str]:
        """Swap to the edited upstreams; returns the names built afresh (new or changed)."""
        kept = {name for name, spec in config.upstreams.items() if self._specs.get(name) == spec}
        if kept == set(self._specs) == set(config.upstreams):
            return []
        fresh = [name for name in config.upstreams if name not in kept]
        upstreams = {
            name: self.upstreams[name] if name in kept else self._build(name, spec)
            for name, spec in config.upstreams.items()
        }
        built = build_routes(config, upstreams)
        routes = {name: self.routes[name] if name in kept else built[name] for name in config.upstreams}
        retired = [upstream for name, upstream in self.upstreams.items() if name not in kept]
        self._specs = dict(config.upstreams)
        self.upstreams.clear()
        self.upstreams.update(upstreams)
        self.routes.clear()
        self.routes.update(routes)
        old_prober, self._prober = self._prober, HealthProber(probe_targets(self.routes))
        self._prober.start()
        self._retired.extend(retired)
        task = asyncio.get_running_loop().create_task(self._retire(old_prober, retired))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return fresh

    async def _retire(self, prober: HealthProber, upstreams: list[Upstream]) -> None:
        await prober.aclose()
        await asyncio.sleep(self._retire_after_s)
        for upstream in upstreams:
            self._retired.remove(upstream)
        await asyncio.gather(*(u.aclose() for u in upstreams), return_exceptions=True)

    async def aclose(self) -> None:
        for task in list(self._retiring):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._prober.aclose()
        closing = [*self.upstreams.values(), *self._retired]
        await asyncio.gather(*(u.aclose() for u in closing), return_exceptions=True)
