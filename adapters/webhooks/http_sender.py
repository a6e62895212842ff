"""Webhook deliveries over aiohttp: one POST, no redirect followed (a receiver cannot bounce a
signed event to an address the tenant's policy would not allow), a bounded time, and every
failure to get an answer reported as None rather than raised."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp


class HttpWebhookSender:
    def __init__(self, max_connections: int = 64) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections), auto_decompress=False
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
