"""The webhook sender connects only to public addresses unless the operator allows private ones:
a name checked before the delivery cannot lead the connection inside by resolving there."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from adapters.webhooks.http_sender import HttpWebhookSender, PublicOnlyResolver
from gateway.tools.hosts import is_public_address


def result(address: str) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return {
        "hostname": "hook.example",
        "host": address,
        "port": 443,
        "family": family,
        "proto": 0,
        "flags": 0,
    }


class FixedResolver(AbstractResolver):
    """A DNS answer chosen by the test (aiohttp's resolver interface, not the gateway's code)."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [result(a) for a in self.addresses]

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("203.0.113.7", False),  # documentation range: reserved, not global
        ("93.184.215.14", True),
        ("10.1.2.3", False),
        ("127.0.0.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("::1", False),
        ("fe80::1%eth0", False),
        ("::ffff:10.0.0.1", False),
        ("2606:4700:4700::1111", True),
        ("not an address", False),
    ],
)
def test_public_addresses_are_told_apart_as_in_urls(address: str, public: bool) -> None:
    assert is_public_address(address) is public


async def test_the_resolver_keeps_the_public_answers_and_refuses_a_name_with_none() -> None:
    mixed = PublicOnlyResolver(FixedResolver(["10.0.0.5", "93.184.215.14", "::1"]))
    assert [r["host"] for r in await mixed.resolve("hook.example", 443)] == ["93.184.215.14"]
    inner = FixedResolver(["127.0.0.1", "169.254.169.254"])
    inside = PublicOnlyResolver(inner)
    with pytest.raises(OSError, match="no public address"):
        await inside.resolve("hook.example", 443)
    await inside.close()
    assert inner.closed


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[int, list[bytes]]]:
    received: list[bytes] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1], received
    finally:
        await runner.cleanup()


async def test_a_name_resolving_to_loopback_is_not_connected_to_unless_private_is_allowed(
    receiver: tuple[int, list[bytes]],
) -> None:
    port, received = receiver
    url = f"http://localhost:{port}/hook"  # a name: the lookup, not the URL, says where it goes
    strict = HttpWebhookSender()
    try:
        assert await strict.post(url, b"event-1", {"content-type": "application/json"}, 5.0) is None
    finally:
        await strict.aclose()
    assert received == []
    lenient = HttpWebhookSender(allow_private=True)
    try:
        assert await lenient.post(url, b"event-2", {"content-type": "application/json"}, 5.0) == 204
    finally:
        await lenient.aclose()
    assert received == [b"event-2"]
