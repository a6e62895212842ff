"""The upstream client on the wire: against a raw TCP server that answers exactly the bytes a
test gives it, the ways HTTP/1.1 servers frame, encode, end and break their answers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import ssl
import subprocess
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from adapters.upstream.http_client import PAUSE_BYTES, HttpClient
from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Wire:
    """A loopback server running `handler` for each connection, counting connections and
    keeping every request head it read."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []
        self.port = 0

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """One request's head and body (Content-Length only: what the client sends)."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return await reader.readexactly(length) if length else b""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def wire(handler_of: Callable[[Wire], Handler]) -> AsyncIterator[Wire]:
    state = Wire(lambda r, w: asyncio.sleep(0))
    state.handler = handler_of(state)
    server = await asyncio.start_server(state._serve, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


def answering(*answers: bytes, keep_open: bool = True) -> Callable[[Wire], Handler]:
    """Each request on a connection gets the next answer, bytes as given."""

    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for answer in answers:
                await state.read_request(reader)
                writer.write(answer)
                await writer.drain()
            if keep_open:
                await reader.read()  # until the client closes

        return handler

    return handler_of


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


@asynccontextmanager
async def client(max_connections: int = 4) -> AsyncIterator[HttpClient]:
    http = HttpClient("wire", max_connections=max_connections, connect_timeout=2.0)
    try:
        yield http
    finally:
        await http.aclose()


async def test_answers_reuse_one_keep_alive_connection() -> None:
    async with wire(answering(*[ok(b"{}")] * 5)) as server, client() as http:
        for _ in range(5):
            answer = await http.post(f"http://127.0.0.1:{server.port}/v1/x", b"{}", {}, 5.0)
            assert (answer.status, answer.body) == (200, b"{}")
    assert server.connections == 1


async def test_a_chunked_answer_is_read_whole_and_the_connection_kept() -> None:
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
    async with wire(answering(chunked, chunked)) as server, client() as http:
        for _ in range(2):
            answer = await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0)
            assert answer.body == b"abcdefg"
    assert server.connections == 1


async def test_an_answer_delimited_by_the_connections_end_is_whole_and_not_reused() -> None:
    until_close = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + b'{"a": 1}'
    async with wire(answering(until_close, keep_open=False)) as server, client() as http:
        for _ in range(2):
            answer = await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0)
            assert answer.body == b'{"a": 1}'
    assert server.connections == 2


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data, wbits=-15)),  # raw deflate, as some servers send
    ],
)
async def test_gzip_and_deflate_answers_are_decoded(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    body = b'{"choices": []}' * 100
    answer = ok(encode(body), b"content-encoding: %s\r\n" % encoding.encode())
    async with wire(answering(answer)) as server, client() as http:
        whole = await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0)
    assert whole.body == body
    assert whole.headers["content-encoding"] == encoding


async def test_a_gzipped_stream_is_decoded_block_by_block() -> None:
    events = [b'data: {"n": %d}\n\n' % n for n in range(50)]
    packer = zlib.compressobj(wbits=31)
    pieces = [packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH) for event in events] + [packer.flush()]

    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await state.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n")
            for piece in pieces:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await reader.read()

        return handler

    async with wire(handler_of) as server, client() as http:
        stream = await http.open_stream(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0, 5.0)
        received = b"".join([block async for block in stream.blocks()])
        stream.close()
    assert received == b"".join(events)


async def test_an_interim_100_answer_is_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"done")
    async with wire(answering(answer)) as server, client() as http:
        whole = await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0)
    assert (whole.status, whole.body) == (200, b"done")


async def test_a_connection_closed_before_any_answer_is_upstream_disconnected() -> None:
    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await state.read_request(reader)  # and close without a word

        return handler

    async with wire(handler_of) as server, client() as http:
        with pytest.raises(UpstreamUnavailable) as raised:
            await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0)
    assert raised.value.code == "upstream_disconnected"


@pytest.mark.parametrize(
    "cut",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"x" * 10,
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabcde\r\n",
    ],
)
async def test_a_body_cut_short_is_upstream_incomplete(cut: bytes) -> None:
    async with wire(answering(cut, keep_open=False)) as server, client() as http:
        with pytest.raises(UpstreamError) as raised:
            await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0)
        stream = await http.open_stream(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0, 5.0)
        with pytest.raises(UpstreamError) as raised_streamed:
            async for _ in stream.blocks():
                pass
        stream.close()
    assert raised.value.code == "upstream_incomplete"
    assert raised_streamed.value.code == "upstream_incomplete"


async def test_a_malformed_answer_is_an_upstream_error_not_a_crash() -> None:
    async with wire(answering(b"SMTP ready\r\n\r\n", keep_open=False)) as server, client() as http:
        with pytest.raises(UpstreamError) as raised:
            await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0)
    assert raised.value.status == 502


async def test_an_upstream_that_never_answers_times_out_at_the_head_limit() -> None:
    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await state.read_request(reader)
            await reader.read()

        return handler

    async with wire(handler_of) as server, client() as http:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(UpstreamTimeout):
            await http.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 30.0, head_within=0.2)
        assert loop.time() - started < 10
        with pytest.raises(UpstreamTimeout):
            await http.open_stream(f"http://127.0.0.1:{server.port}/", b"{}", {}, 0.2, 5.0)


async def test_a_stream_silent_between_chunks_times_out() -> None:
    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await state.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n")
            await reader.read()

        return handler

    async with wire(handler_of) as server, client() as http:
        stream = await http.open_stream(f"http://127.0.0.1:{server.port}/", b"{}", {}, 5.0, 0.2)
        blocks = stream.blocks()
        assert await anext(blocks) == b"data: "
        with pytest.raises(UpstreamTimeout):
            await anext(blocks)
        stream.close()


async def test_no_more_connections_than_the_limit_and_every_request_served() -> None:
    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                await state.read_request(reader)
                await asyncio.sleep(0.02)
                writer.write(ok(b"{}"))
                await writer.drain()

        return handler

    async with wire(handler_of) as server, client(max_connections=2) as http:
        url = f"http://127.0.0.1:{server.port}/"
        answers = await asyncio.gather(*[http.post(url, b"{}", {}, 10.0) for _ in range(12)])
    assert [a.status for a in answers] == [200] * 12
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async with wire(answering(ok(b"{}"), keep_open=False)) as server, client() as http:
        url = f"http://127.0.0.1:{server.port}/"
        await http.post(url, b"{}", {}, 5.0)
        await asyncio.sleep(0.1)  # the server's close arrives while the connection is idle
        assert (await http.post(url, b"{}", {}, 5.0)).status == 200
    assert server.connections == 2


async def test_a_cancelled_request_drops_its_connection() -> None:
    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await state.read_request(reader)
            if state.connections == 1:
                await asyncio.sleep(0.5)  # the first request is cancelled before this answer
            writer.write(ok(b"late" if state.connections == 1 else b"fresh"))
            await writer.drain()
            await reader.read()

        return handler

    async with wire(handler_of) as server, client() as http:
        url = f"http://127.0.0.1:{server.port}/"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(http.post(url, b"{}", {}, 5.0), 0.1)
        answer = await http.post(url, b"{}", {}, 5.0)
    assert answer.body == b"fresh"  # never the first request's late answer
    assert server.connections == 2


def unfinished_stream_then_ok(state: Wire) -> Handler:
    """The first connection gets a stream that never ends; each later one a whole answer."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = state.connections == 1
        await state.read_request(reader)
        writer.write(UNFINISHED if first else ok(b"{}"))
        await reader.read()

    return handler


UNFINISHED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n"


async def test_a_stream_not_read_to_its_end_is_not_reused() -> None:
    async with wire(unfinished_stream_then_ok) as server, client() as http:
        url = f"http://127.0.0.1:{server.port}/"
        stream = await http.open_stream(url, b"{}", {}, 5.0, 5.0)
        assert await anext(stream.blocks()) == b"first"
        stream.close()
        assert (await http.post(url, b"{}", {}, 5.0)).status == 200
    assert server.connections == 2


async def test_a_slow_reader_pauses_the_socket_and_still_gets_every_byte() -> None:
    total = 8 * PAUSE_BYTES
    piece = b"y" * 65536

    def handler_of(state: Wire) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(2):  # the stream, then the whole answer on the same connection
                await state.read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
                for _ in range(total // len(piece)):
                    writer.write(piece)
                    await writer.drain()
            await reader.read()

        return handler

    async with wire(handler_of) as server, client() as http:
        url = f"http://127.0.0.1:{server.port}/"
        stream = await http.open_stream(url, b"{}", {}, 5.0, 5.0)
        received = 0
        async for block in stream.blocks():
            assert len(block) < 3 * PAUSE_BYTES  # the pause mark and one socket read at most
            received += len(block)
            await asyncio.sleep(0.01)
        stream.close()
        whole = await http.post(url, b"{}", {}, 10.0)  # a whole answer that size is read too
    assert received == total
    assert len(whole.body) == total
    assert server.connections == 1


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with wire(answering(ok(b"{}"))) as server, client() as http:
        url = f"http://127.0.0.1:{server.port}/"
        for value in ("a\r\nx-injected: 1", "a\nb", "a\rb"):
            with pytest.raises(UpstreamError):
                await http.post(url, b"{}", {"x-request-id": value}, 5.0)
    assert server.heads == []


async def test_the_head_names_the_host_path_and_length() -> None:
    async with wire(answering(ok(b"{}"), ok(b"{}"))) as server, client() as http:
        await http.post(f"http://127.0.0.1:{server.port}/v1/chat/completions?x=1", b"{}", {"a": "b"}, 5.0)
        await http.get(f"http://127.0.0.1:{server.port}/health", {}, 5.0)
    post, get = server.heads
    assert post.startswith(b"POST /v1/chat/completions?x=1 HTTP/1.1\r\n")
    assert b"host: 127.0.0.1:%d\r\n" % server.port in post
    assert b"content-length: 2\r\n" in post
    assert b"a: b\r\n" in post
    assert get.startswith(b"GET /health HTTP/1.1\r\n")
    assert b"content-length" not in get


async def test_a_port_nobody_listens_on_is_cannot_connect() -> None:
    async with wire(answering()) as server:
        port = server.port
    async with client() as http:
        with pytest.raises(UpstreamUnavailable) as raised:
            await http.post(f"http://127.0.0.1:{port}/", b"{}", {}, 5.0)
    assert raised.value.code == "upstream_unavailable"


async def test_a_stream_dropped_without_close_gives_its_connection_back_to_the_limit() -> None:
    async with wire(unfinished_stream_then_ok) as server, client(max_connections=1) as http:
        url = f"http://127.0.0.1:{server.port}/"
        stream = await http.open_stream(url, b"{}", {}, 5.0, 5.0)
        del stream
        gc.collect()
        assert (await http.post(url, b"{}", {}, 2.0)).status == 200
    assert server.connections == 2


@pytest.fixture
def tls_server_context(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a fresh self-signed certificate for localhost, and the
    certificate's file (what a client must trust)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert


async def test_https_upstreams_are_verified_and_served(
    tls_server_context: tuple[ssl.SSLContext, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    context, cert = tls_server_context
    state = Wire(lambda r, w: asyncio.sleep(0))
    state.handler = answering(ok(b'{"over": "tls"}'), ok(b"again"))(state)
    server = await asyncio.start_server(state._serve, "127.0.0.1", 0, ssl=context)
    url = f"https://localhost:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    try:
        # Not trusted: the certificate is refused, as any unknown one.
        async with client() as http:
            with pytest.raises(UpstreamUnavailable):
                await http.post(url, b"{}", {}, 5.0)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what the default context trusts
        async with client() as http:
            first = await http.post(url, b"{}", {}, 5.0)
            second = await http.post(url, b"{}", {}, 5.0)
    finally:
        server.close()
    assert (first.body, second.body) == (b'{"over": "tls"}', b"again")
    assert state.heads[-1].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost:")
