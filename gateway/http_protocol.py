"""uvicorn's httptools protocol, sending what a response writes in one turn of the loop at once.

uvicorn writes a response's head and its body with two `transport.write` calls, and uvloop
sends each at once: two system calls and two TCP segments for every response. Here the
protocol's transport holds writes until the end of the loop's current turn and sends them
together, so a whole non-streamed response leaves in one call, and stream events produced in
the same turn share one. Nothing waits longer than the turn that wrote it.
`python -m bench.overhead` measured the effect (docs/benchmarks.md).

`tollgate serve` gives uvicorn `HTTP_PROTOCOL` as its `http` setting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HTTP_PROTOCOL = "gateway.http_protocol:TurnBufferedHttpToolsProtocol"


class TurnBufferedTransport:
    """A transport whose writes are sent together at the end of the loop's turn.

    Everything else is the wrapped transport's. `close()` sends what is held first, as a
    transport's own close does with its buffer; `abort()` drops it.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes | bytearray | memoryview] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        held = self._held
        if not held:
            return
        self._held = []
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
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(data) for data in self._held)

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
        buffered = TurnBufferedTransport(transport, self.loop)
        super().connection_made(buffered)  # type: ignore[arg-type]
