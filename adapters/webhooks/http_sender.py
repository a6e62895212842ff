"""Webhook deliveries over aiohttp: one POST, no redirect followed (a receiver cannot bounce a
signed event to an address the tenant's policy would not allow), a bounded time, and every
failure to get an answer reported as None rather than raised.

URLs are checked by name before a delivery (gateway/jobs/webhook_destinations.py); a public
name can still resolve to a private address (a DNS record pointing inside, or changed after
the check). Unless the operator lets webhooks reach private addresses
(`jobs.webhook_allow_private`), the connection's own lookup keeps only public addresses, so
what is checked is what is connected to: a name with none left fails like an unreachable
receiver (retried, then given up).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.tools.hosts import is_public_address


class PublicOnlyResolver(AbstractResolver):
    """A resolver that drops every address that is not public from what `inner` returns."""

    def __init__(self, inner: AbstractResolver) -> None:
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        public = [r for r in await self._inner.resolve(host, port, family) if is_public_address(r["host"])]
        if not public:
            raise OSError(f"{host} resolves to no public address")
        return public

    async def close(self) -> None:
        await self._inner.close()


class HttpWebhookSender:
    def __init__(self, max_connections: int = 64, allow_private: bool = False) -> None:
        """`allow_private`: connect to private addresses a name resolves to (the operator's
        `jobs.webhook_allow_private`); otherwise only public ones."""
        self._max_connections = max_connections
        self._allow_private = allow_private
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            resolver = None if self._allow_private else PublicOnlyResolver(aiohttp.DefaultResolver())
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, resolver=resolver),
                auto_decompress=False,
            )
        return self._session

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> int | None:
        try:
            async with self._client().post(
                url,
                data=body,
                headers=dict(headers),
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
