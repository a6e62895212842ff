"""The life of a request, in order.

    admit -> route -> forward -> response guards -> finish

`app.py` assembles the stage list from config; later capabilities (decide, enforce,
meter) are stages inserted between admit and forward, guards appended to the way back,
and finishers (settle, audit completion) appended to the end. Finishers always run,
whatever happened before them, so nothing reserved or begun is ever left open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway import cohorts
from gateway.doors.openai import OPENAI_STREAM
from gateway.errors import UpstreamError
from gateway.exchange import Exchange
from gateway.forward import Forwarder, OpenStream
from gateway.guards import ErrorGuard, ResponseGuard
from gateway.ports import Chunk
from gateway.stream_relay import relay

if TYPE_CHECKING:
    from gateway.doors.base import StreamEncoder

logger = logging.getLogger("tollgate.pipeline")


class Stage(Protocol):
    name: str

    async def __call__(self, exchange: Exchange) -> None: ...


class Finisher(Protocol):
    name: str

    async def finish(self, exchange: Exchange) -> None: ...


class Pipeline:
    def __init__(
        self,
        stages: Sequence[Stage],
        forwarder: Forwarder,
        guards: Sequence[ResponseGuard],
        finishers: Sequence[Finisher],
        error_guards: Sequence[ErrorGuard] = (),
    ) -> None:
        self.stages = tuple(stages)
        self.forwarder = forwarder
        self.guards = tuple(guards)
        self.finishers = tuple(finishers)
        self.error_guards = tuple(error_guards)

    async def prepare(self, exchange: Exchange) -> None:
        await cohorts.together()
        trace = exchange.trace
        if not trace.sampled:  # nothing is recorded: no stage span to open around each stage
            for stage in self.stages:
                await stage(exchange)
            return
        for stage in self.stages:
            with trace.stage(stage.name):
                await stage(exchange)

    async def respond(self, exchange: Exchange) -> dict[str, Any]:
        try:
            response = await self.forwarder.complete(exchange)
        except UpstreamError as exc:
            self._guard_error(exchange, exc)
            raise
        return self.guard_response(exchange, response.body)

    def guard_response(self, exchange: Exchange, body: dict[str, Any]) -> dict[str, Any]:
        """A whole answer through the response guards (also for one an upstream's own queue gave)."""
        for guard in self.guards:
            guard.on_response(exchange, body)
        return body

    def guard_error(self, exchange: Exchange, error: UpstreamError) -> None:
        self._guard_error(exchange, error)

    async def open_stream(self, exchange: Exchange) -> OpenStream:
        try:
            return await self.forwarder.open_stream(exchange)
        except UpstreamError as exc:
            self._guard_error(exchange, exc)
            raise

    def _guard_error(self, exchange: Exchange, error: UpstreamError) -> None:
        """An upstream's error goes to the client as its content would: through the error guards."""
        for guard in self.error_guards:
            guard.on_error(exchange, error)

    def relay(
        self, exchange: Exchange, opened: OpenStream, encoder: StreamEncoder = OPENAI_STREAM
    ) -> AsyncIterator[bytes]:
        """Server-sent events for the client, through the guards and the door's encoder
        (gateway/stream_relay.py)."""
        return relay(self, exchange, opened, encoder)

    def guard_chunk(self, exchange: Exchange, chunk: Chunk, start: int) -> list[Chunk]:
        """`chunk` through the guards from the `start`th on: what comes out for the client."""
        chunks = [chunk]
        for guard in self.guards[start:]:
            if len(chunks) == 1:
                chunks = guard.on_chunk(exchange, chunks[0])
            else:
                chunks = [out for c in chunks for out in guard.on_chunk(exchange, c)]
            if not chunks:
                break
        return chunks

    async def finish(self, exchange: Exchange) -> None:
        if exchange.completed_at is None:
            exchange.completed_at = time.monotonic()
        cancelled = False
        try:
            await cohorts.together()
        except asyncio.CancelledError:
            cancelled = True  # the finishers run all the same: a reservation is settled, a decision logged
        for finisher in self.finishers:
            try:
                await finisher.finish(exchange)
            except Exception:
                logger.exception(
                    "finisher failed", extra={"request_id": exchange.request_id, "finisher": finisher.name}
                )
        if cancelled:
            raise asyncio.CancelledError
