"""A stream's way back to the client: chunk by chunk, through the pipeline's guards, then
through the door's encoder.

Plain Python beside the compiled pipeline (gateway/pipeline.py): an async generator, which
mypyc does not compile (docs/architecture.md, Compiled request path).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from gateway.doors.openai import OPENAI_STREAM
from gateway.errors import GatewayError, UpstreamError
from gateway.exchange import Exchange
from gateway.forward import OpenStream
from gateway.stream_deadline import StreamDeadline

if TYPE_CHECKING:
    from gateway.doors.base import StreamEncoder
    from gateway.pipeline import Pipeline


async def relay(
    pipeline: Pipeline, exchange: Exchange, opened: OpenStream, encoder: StreamEncoder = OPENAI_STREAM
) -> AsyncIterator[bytes]:
    """Server-sent events for the client, chunk by chunk, through the guards, then
    through the door's encoder (OpenAI's chunks as they are, by default).

    The first events go out as soon as they are ready; after them, the events of the
    chunks one upstream read brought (those the stream has in hand, `ready`) go out
    together, as one message, when the last of them has been through the guards; the
    guards know which chunks have others after them (`Exchange.more_in_hand`).

    A failure mid-stream (the upstream's, or a guard's) becomes an error event and the stream ends without
    [DONE], which OpenAI clients report as an error. The upstream stream is closed in
    every case, including when the client goes away and this generator is cancelled.
    """
    deadline = StreamDeadline(exchange.deadline)
    ready: Callable[[], int] = getattr(opened.stream, "ready", _none_ready)
    held: list[bytes] = []  # events not sent yet: their chunks' read has more chunks in hand
    started = False
    try:
        chunk = opened.first
        while chunk is not None:
            exchange.more_in_hand = started and ready() > 0
            for out in pipeline.guard_chunk(exchange, chunk, 0):
                if event := encoder.chunk(out):
                    held.append(event)
            if held and not exchange.more_in_hand:  # the last of its read (or the first chunk)
                yield held[0] if len(held) == 1 else b"".join(held)
                held.clear()
                started = True
            chunk = await deadline.next(opened.chunks)
        exchange.more_in_hand = False
        if held:  # a stream that said it had more in hand, and ended
            yield b"".join(held)
            held.clear()
        for index, guard in enumerate(pipeline.guards):
            for held_chunk in guard.on_end(exchange):
                for out in pipeline.guard_chunk(exchange, held_chunk, index + 1):
                    if event := encoder.chunk(out):
                        yield event
        yield await encoder.done()
    except GatewayError as exc:  # upstream failures, and a guard's own refusal or failure
        if isinstance(exc, UpstreamError):
            try:
                pipeline.guard_error(exchange, exc)
            except GatewayError as refused:  # the guard's own failure replaces the upstream's
                exc = refused
        exchange.status = exc.status
        exchange.error_code = exc.code
        held.append(encoder.error(exc))
        yield b"".join(held)
    except Exception:
        if held:  # what came before the failure goes out, as it would have one by one
            yield b"".join(held)
        raise
    finally:
        deadline.close()
        await opened.stream.aclose()


def _none_ready() -> int:
    """A stream that cannot tell what it has in hand: each chunk's events go out on their own."""
    return 0
