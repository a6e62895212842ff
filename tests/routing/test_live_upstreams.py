"""What a config edit does to the running upstreams: unchanged ones kept whole (their pools
and circuits), new or changed ones built, removed ones closed once no request can use them."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.config import GatewayConfig, UpstreamConfig
from gateway.ports import Health, Upstream, UpstreamRequest, UpstreamResponse
from gateway.routing.live_upstreams import LiveUpstreams


class Recorded:
    """An upstream at the port, recording whether it was closed."""

    provider = "openai"

    def __init__(self, name: str, spec: UpstreamConfig) -> None:
        self.name = name
        self.spec = spec
        self.replicas = (str(spec.base_url),)
        self.address = "127.0.0.1:9"
        self.closed = False

    async def complete(self, request: UpstreamRequest) -> UpstreamResponse:
        raise NotImplementedError

    async def stream(self, request: UpstreamRequest) -> Any:
        raise NotImplementedError

    async def check_health(self, replica: int, timeout_s: float) -> Health:
        return Health.UP

    async def aclose(self) -> None:
        self.closed = True


def config(**upstreams: str) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "upstreams": {
                name: {"kind": "openai_compat", "base_url": url} for name, url in upstreams.items()
            },
            "models": {"chat": [{"upstream": next(iter(upstreams)), "model": "m"}]},
            "tenants": {},
        }
    )


def build(name: str, spec: UpstreamConfig) -> Upstream:
    return Recorded(name, spec)


async def test_an_edit_keeps_what_it_left_alone_and_retires_the_rest() -> None:
    running = LiveUpstreams(config(a="http://a:1/v1", b="http://b:1/v1"), build, retire_after_s=0.0)
    running.start()
    try:
        a, b = running.upstreams["a"], running.upstreams["b"]
        route_a = running.routes["a"]
        routes = running.routes
        fresh = running.update(config(a="http://a:1/v1", b="http://b:2/v1", c="http://c:1/v1"))
        assert fresh == ["b", "c"]
        assert running.routes is routes  # changed in place: readiness and metrics read this one
        assert running.upstreams["a"] is a and running.routes["a"] is route_a
        assert running.upstreams["b"] is not b and set(running.routes) == {"a", "b", "c"}
        for _ in range(200):
            if b.closed:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.01)
        assert b.closed and not a.closed  # type: ignore[attr-defined]
        assert running.update(config(a="http://a:1/v1", b="http://b:2/v1", c="http://c:1/v1")) == []
        running.update(config(a="http://a:1/v1"))
        assert set(running.routes) == {"a"}
    finally:
        await running.aclose()
    assert all(u.closed for u in running.upstreams.values())  # type: ignore[attr-defined]


async def test_closing_closes_the_upstreams_still_waiting_to_retire() -> None:
    running = LiveUpstreams(config(a="http://a:1/v1"), build, retire_after_s=3600)
    old = running.upstreams["a"]
    running.update(config(a="http://a:2/v1"))
    await running.aclose()
    assert old.closed and running.upstreams["a"].closed  # type: ignore[attr-defined]
