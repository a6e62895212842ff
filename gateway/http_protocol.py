"""uvicorn's httptools protocol, sending a response's head and body in one write.

uvicorn writes a response's head and its body with two `transport.write` calls, and uvloop
sends each at once: two system calls and two TCP segments for every response. Here the
protocol's transport holds a write back until the next one, and sends the two together: a
whole non-streamed response leaves in one call, and a stream's head leaves with its first
event. A write that nothing follows is sent at the end of the loop's turn, so nothing waits
longer than the turn that wrote it. `python -m bench.overhead` measured the effect
(docs/benchmarks.md).

`tollgate serve` gives uvicorn `HTTP_PROTOCOL` as its `http` setting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HTTP_PROTOCOL = "gateway.http_protocol:TurnBufferedHttpToolsProtocol"


class TurnBufferedTransport:
    """A transport that sends writes in pairs, a lone write at the end of the loop's turn.

    Everything else is the wrapped transport's. `close()` sends what is held first, as a
    transport's own close does with its buffer; `abort()` drops it.
    """

    __slots__ = ("_held", "_loop", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | bytearray | memoryview | None = None
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        held = self._held
        if held is None:
            self._held = data
            if not self._scheduled:
                self._scheduled = True
                self._loop.call_soon(self._end_of_turn)
            return
        self._held = None
        if not self._transport.is_closing():
            self._transport.writelines((held, data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _end_of_turn(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        held = self._held
        if held is None:
            return
        self._held = None
        if not self._transport.is_closing():  # else the client left: nothing to send it to
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + (len(self._held) if self._held is not None else 0)

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
