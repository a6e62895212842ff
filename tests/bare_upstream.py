"""A small OpenAI-compatible server shaped like llama-cpp-python's, for tests the simulator
does not cover: it reports no usage (it ignores `stream_options.include_usage`), serves one
request at a time, and its health route waits behind the request being served, as a server
busy with a long prefill does. It runs on its own event loop in a thread, on port 0.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class BareControls:
    """What the next requests meet; set from the test's thread (plain attribute writes)."""

    prefill_s: float = 0.0  # time before the first token, holding the one slot
    reply: list[str] = field(default_factory=lambda: ["Hello", " there", "!"])
    reasoning: list[str] = field(default_factory=list)  # reasoning_content deltas before the reply
    tool_arguments: list[str] = field(default_factory=list)  # tool-call argument deltas after it
    status: int | None = None  # answer every chat request with this error status
    error_message: str = "rejected"
    health_status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)  # bodies received, in order
    health_checks: int = 0


class BareUpstream:
    def __init__(self) -> None:
        self.controls = BareControls()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._slot: asyncio.Lock | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the bare upstream did not start")
        self._thread = thread

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(15)
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(15)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._slot = asyncio.Lock()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _health(self, request: web.Request) -> web.Response:
        assert self._slot is not None
        async with self._slot:  # busy serving: the health check waits its turn
            self.controls.health_checks += 1
            return web.json_response({"status": "ok"}, status=self.controls.health_status)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        controls = self.controls
        controls.requests.append(body)
        if controls.status is not None:
            return web.json_response(
                {"error": {"message": controls.error_message, "type": "invalid_request_error"}},
                status=controls.status,
            )
        assert self._slot is not None
        async with self._slot:
            await asyncio.sleep(controls.prefill_s)
            if body.get("stream"):
                return await self._stream(request, body)
            message: dict[str, Any] = {"role": "assistant", "content": "".join(controls.reply)}
            if controls.reasoning:
                message["reasoning_content"] = "".join(controls.reasoning)
            return web.json_response(
                {
                    "id": "chatcmpl-bare",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
            )

    async def _stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        controls = self.controls
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        head = {"id": "chatcmpl-bare", "object": "chat.completion.chunk", "created": int(time.time())}
        head["model"] = body.get("model")
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"reasoning_content": piece} for piece in controls.reasoning]
        deltas += [{"content": piece} for piece in controls.reply]
        for index, piece in enumerate(controls.tool_arguments):
            call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
            if index == 0:
                call.update(id="call_1", type="function")
                call["function"]["name"] = "lookup"
            deltas.append({"tool_calls": [call]})
        for delta in deltas:
            chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        last = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        await response.write(b"data: " + orjson.dumps(last) + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response


@contextmanager
def bare_upstream() -> Iterator[BareUpstream]:
    server = BareUpstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()
