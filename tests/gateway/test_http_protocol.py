"""The server's transport sends a response's head and body in one call, a stream's later events
together, holds nothing past the loop's turn, and loses nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.http_protocol import GATHER_MAX, TurnBufferedTransport
from tests.servers import RunningGateway


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, list_of_data: Any) -> None:
        self.calls.append(("writelines", b"|".join(bytes(d) for d in list_of_data)))

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", b""))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5555)}.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.calls.append(("limits", f"{high}/{low}".encode()))


async def _turn() -> None:
    await asyncio.sleep(0)


async def test_a_head_and_its_body_leave_in_one_call() -> None:
    inner = RecordingTransport()
    transport = TurnBufferedTransport(inner, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert inner.calls == []  # held for what follows
    assert transport.get_write_buffer_size() == 7 + 19
    transport.write(b"{}")
    assert inner.calls == [("writelines", b"HTTP/1.1 200 OK\r\n\r\n|{}")]  # at once, not a turn later
    await _turn()
    assert len(inner.calls) == 1


async def test_a_lone_write_is_sent_at_the_end_of_its_turn() -> None:
    inner = RecordingTransport()
    transport = TurnBufferedTransport(inner, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    transport.write(b"")  # nothing to send: no call
    assert inner.calls == []
    await _turn()
    assert inner.calls == [("write", b"HTTP/1.1 100 Continue\r\n\r\n")]


async def test_a_stream_s_later_events_leave_together_at_the_end_of_the_turn_in_order() -> None:
    inner = RecordingTransport()
    transport = TurnBufferedTransport(inner, asyncio.get_running_loop())
    transport.write(b"head")
    transport.write(b"event 1")
    assert inner.calls == [("writelines", b"head|event 1")]  # the first event is not held back
    transport.writelines([b"event 2", b"event 3"])
    transport.write(b"event 4")
    assert len(inner.calls) == 1
    assert transport.get_write_buffer_size() == 7 + 21
    await _turn()
    assert inner.calls[1:] == [("writelines", b"event 2|event 3|event 4")]
    transport.write(b"event 5")
    await _turn()
    await _turn()
    assert inner.calls[2:] == [("write", b"event 5")]


async def test_gathered_writes_leave_at_once_when_they_reach_the_cap() -> None:
    inner = RecordingTransport()
    transport = TurnBufferedTransport(inner, asyncio.get_running_loop())
    transport.write(b"head")
    transport.write(b"event 1")
    piece = b"x" * (GATHER_MAX // 4)
    for _ in range(4):
        transport.write(piece)
    assert inner.calls[1:] == [("writelines", b"|".join([piece] * 4))]  # within the turn
    transport.write(b"after")
    await _turn()
    assert inner.calls[2:] == [("write", b"after")]


async def test_a_finished_response_leaves_at_once_and_the_next_pairs_its_head_and_body() -> None:
    inner = RecordingTransport()
    transport = TurnBufferedTransport(inner, asyncio.get_running_loop())
    transport.writelines([b"head 1", b"event 1", b"[DONE]", b"0"])
    transport.response_done()
    assert inner.calls == [("writelines", b"head 1|event 1"), ("writelines", b"[DONE]|0")]
    transport.write(b"head 2")
    transport.write(b"body 2")
    assert inner.calls[2:] == [("writelines", b"head 2|body 2")]
    await _turn()
    assert len(inner.calls) == 3


async def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    closed = RecordingTransport()
    transport = TurnBufferedTransport(closed, loop)
    transport.write(b"last words")
    transport.close()
    assert closed.calls == [("write", b"last words"), ("close", b"")]

    aborted = RecordingTransport()
    transport = TurnBufferedTransport(aborted, loop)
    transport.write(b"never sent")
    transport.abort()
    await _turn()
    assert aborted.calls == [("abort", b"")]


async def test_nothing_is_written_to_a_transport_already_closing() -> None:
    inner = RecordingTransport()
    transport = TurnBufferedTransport(inner, asyncio.get_running_loop())
    transport.write(b"for a client that left")
    inner.closing = True  # the connection was lost meanwhile
    await _turn()
    assert inner.calls == []
    assert transport.is_closing()


async def test_the_rest_of_the_transport_is_the_wrapped_one() -> None:
    inner = RecordingTransport()
    transport = TurnBufferedTransport(inner, asyncio.get_running_loop())
    assert transport.get_extra_info("peername") == ("127.0.0.1", 5555)
    assert transport.get_extra_info("socket", "none") == "none"
    transport.set_write_buffer_limits(64, 16)  # not one of the wrapper's own methods
    assert inner.calls == [("limits", b"64/16")]


@pytest.mark.parametrize("connection", ["keep-alive", "close"])
async def test_a_real_server_answers_whole_responses_on_the_buffered_transport(
    connection: str, gateway: RunningGateway
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    try:
        for _ in range(3 if connection == "keep-alive" else 1):
            writer.write(f"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: {connection}\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            headers = dict(line.split(b": ", 1) for line in head.strip().split(b"\r\n")[1:])
            length = int(headers[b"content-length"])
            body = await asyncio.wait_for(reader.readexactly(length), 5)
            assert body.startswith(b"{")
        if connection == "close":  # the server closes after the answer, which was sent first
            assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        writer.close()
