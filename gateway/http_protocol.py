"""uvicorn's httptools protocol, sending a response's writes together.

uvicorn writes a response's head and its body with two `transport.write` calls, and a
stream's events with one each, and uvloop sends each at once: a system call and a TCP
segment per write. Here the protocol's transport holds writes back and sends them together:

- a response's first two writes (its head and the start of its body) leave together at once,
  so a whole non-streamed response is one call and a stream's head leaves with its first event;
- its later writes (a stream's further events) are gathered until the end of the loop's turn,
  or until `GATHER_MAX` bytes are held: the events one upstream read delivered leave in one
  call, and none waits longer than the turn that wrote it.

`python -m bench.overhead` and `python -m bench.leases --streams` measured the effect
(docs/benchmarks.md). `tollgate serve` gives uvicorn `HTTP_PROTOCOL` as its `http` setting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HTTP_PROTOCOL = "gateway.http_protocol:TurnBufferedHttpToolsProtocol"
# How long an idle client connection is kept open: longer than uvicorn's 5 s, so that a client
# reusing its pooled connection after a pause seldom meets the server closing it.
KEEP_ALIVE_S = 30

GATHER_MAX = 64 * 1024
"""Bytes held at most before they are sent, whatever the turn."""


class TurnBufferedTransport:
    """A transport that sends a response's first two writes as a pair, and gathers the later
    ones until the end of the loop's turn (or `GATHER_MAX` bytes).

    `response_done()` sends what is held and makes the next write the start of a new response.
    Everything else is the wrapped transport's. `close()` sends what is held first, as a
    transport's own close does with its buffer; `abort()` drops it.
    """

    __slots__ = ("_held", "_held_size", "_loop", "_pairing", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes | bytearray | memoryview] = []
        self._held_size = 0
        self._pairing = True  # the next write that finds one held sends the pair at once
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        held = self._held
        held.append(data)
        self._held_size += len(data)
        if len(held) == 2 and self._pairing:
            self._pairing = False
            self.flush()
        elif self._held_size >= GATHER_MAX:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._end_of_turn)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def response_done(self) -> None:
        self.flush()
        self._pairing = True

    def _end_of_turn(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        held = self._held
        if not held:
            return
        self._held = []
        self._held_size = 0
        if self._transport.is_closing():  # the client left: nothing to send it to
            return
        if len(held) == 1:
            self._transport.write(held[0])
        else:
            self._transport.writelines(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._held_size = 0
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._held_size

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def __getattr__(self, name: str) -> Any:  # the rest of the Transport interface
        return getattr(self._transport, name)


class TurnBufferedHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.buffered = TurnBufferedTransport(transport, self.loop)
        super().connection_made(self.buffered)  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        # The response's last writes leave now, and the next response pairs its own head and body.
        self.buffered.response_done()
        super().on_response_complete()
