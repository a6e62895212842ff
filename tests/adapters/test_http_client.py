"""The one upstream HTTP client: one session shared by every tenant keeps no upstream's cookies."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from adapters.upstream.http_client import HttpClient
from adapters.upstream.sse import SseChunkStream
from gateway.errors import UpstreamError


@asynccontextmanager
async def serving(app: web.Application, answer: Any) -> AsyncIterator[int]:
    """`app` answering POST /v1/chat/completions on a free loopback port, for the block's length."""
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@pytest.fixture
async def cookie_setting_upstream() -> AsyncIterator[tuple[str, list[str | None]]]:
    """A server that sets a cookie on every answer and notes the Cookie header it was sent."""
    received: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        received.append(request.headers.get("cookie"))
        response = web.json_response({"ok": True})
        response.set_cookie("session", "tenant-a-secret", path="/")
        return response

    async with serving(web.Application(), answer) as port:
        # A host name: a cookie jar would keep no cookie of a bare IP address anyway.
        yield f"http://localhost:{port}/v1/chat/completions", received


async def test_a_cookie_an_upstream_sets_is_never_sent_back(
    cookie_setting_upstream: tuple[str, list[str | None]],
) -> None:
    url, received = cookie_setting_upstream
    client = HttpClient("cookies", max_connections=4, connect_timeout=2.0)
    try:
        for _ in range(3):  # as if for tenant a, then b, then c
            response = await client.post(url, b"{}", {"content-type": "application/json"}, 5.0)
            assert response.status == 200
            assert "tenant-a-secret" in response.headers["set-cookie"]
    finally:
        await client.aclose()
    assert received == [None, None, None]


@pytest.fixture
async def echoing_upstream() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server that keeps every body it receives, whatever its size, and answers 200."""
    received: list[bytes] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        received.append(await request.read())
        if request.query.get("stream"):
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b'data: {"ok": true}\n\ndata: [DONE]\n\n')
            return response
        return web.json_response({"ok": True})

    async with serving(web.Application(client_max_size=8 * 1024 * 1024), answer) as port:
        yield f"http://127.0.0.1:{port}/v1/chat/completions", received


@pytest.mark.parametrize("size", [10, 1024 * 1024 + 1, 4 * 1024 * 1024])
async def test_bodies_up_to_the_gateways_limit_are_sent_whole_without_warnings(
    echoing_upstream: tuple[str, list[bytes]], size: int
) -> None:
    url, received = echoing_upstream
    body = b'{"messages": "' + b"x" * size + b'"}'
    client = HttpClient("large", max_connections=4, connect_timeout=2.0)
    try:
        response = await client.post(url, body, {"content-type": "application/json"}, 30.0)
        assert response.status == 200
        stream = await client.open_stream(
            url + "?stream=1", body, {"content-type": "application/json"}, 30.0, 30.0
        )
        assert b"".join([block async for block in stream.blocks()]).endswith(b"data: [DONE]\n\n")
        stream.close()
    finally:
        await client.aclose()
    assert received == [body, body]  # warnings are errors here: a warning about a large body would fail this


async def test_a_stream_event_that_never_ends_is_a_malformed_chunk_not_a_growing_buffer() -> None:
    """An upstream that sends data with no newline: the stream fails once the event passes
    its bound, as a malformed chunk (a 502 for the client), before the upstream has finished."""
    sent: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        block = b"x" * (1024 * 1024)
        with contextlib.suppress(ConnectionError):
            await response.write(b"data: ")
            for _ in range(64):  # 64 MiB, four times the bound
                await response.write(block)
                sent.append(len(block))
        return response

    async with serving(web.Application(), answer) as port:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        client = HttpClient("endless", max_connections=4, connect_timeout=2.0)
        try:
            stream = await client.open_stream(url, b"{}", {"content-type": "application/json"}, 30.0, 30.0)
            with pytest.raises(UpstreamError) as raised:
                async for _ in SseChunkStream(stream, "endless"):
                    pass
            stream.close()
        finally:
            await client.aclose()
    assert raised.value.code == "upstream_malformed_chunk"
    assert sum(sent) < 64 * 1024 * 1024  # it stopped reading: the upstream could not send it all


async def test_an_upstream_is_sent_the_callers_headers_and_the_usual_defaults_but_no_user_agent() -> None:
    """Every request (whole, stream, health check, a large body sent in pieces) carries the
    caller's headers, a default Accept and Accept-Encoding, and no User-Agent."""
    seen: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        seen.append({k.lower(): v for k, v in request.headers.items()})
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_get("/health", answer)
    async with serving(app, answer) as port:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        sent = {"content-type": "application/json", "x-request-id": "abc"}
        client = HttpClient("headers", max_connections=4, connect_timeout=2.0)
        try:
            await client.post(url, b"{}", dict(sent), 5.0)
            await client.post(url, b"[" + b" " * (2 * 1024 * 1024) + b"]", dict(sent), 5.0)
            stream = await client.open_stream(url, b"{}", {**sent, "accept": "text/event-stream"}, 5.0, 5.0)
            await stream.read()
            stream.close()
            await client.get(f"http://127.0.0.1:{port}/health", {}, 5.0)
        finally:
            await client.aclose()
    assert len(seen) == 4
    for headers in seen:
        assert "user-agent" not in headers
        assert headers["accept-encoding"]
    for headers in seen[:2]:
        assert headers["content-type"] == "application/json"
        assert headers["x-request-id"] == "abc"
        assert headers["accept"] == "*/*"
    assert seen[1]["content-length"] == str(2 * 1024 * 1024 + 2)
    assert seen[2]["accept"] == "text/event-stream"
    assert seen[3]["accept"] == "*/*"
