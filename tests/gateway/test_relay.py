"""The stream relay: the first events go out at once; after them, the events of the chunks
one upstream read brought go out together, before the relay waits for the next read; a
failure sends what came before it, then the error event."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson

from gateway.errors import UpstreamError
from gateway.exchange import Endpoint, Exchange
from gateway.forward import Forwarder, OpenStream
from gateway.pipeline import Pipeline
from gateway.policy.decision import RedactRules
from gateway.ports import Chunk
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN
from gateway.redaction.guard import RedactionGuard
from gateway.redaction.state import RedactionCounters, RedactionState


def _chunk(n: int) -> Chunk:
    data = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": f"t{n}"}}]}
    return Chunk(orjson.dumps(data), data)


def _event(n: int) -> bytes:
    return b"data: " + _chunk(n).raw + b"\n\n"


class _Reads:
    """A chunk stream whose chunks arrive in reads; it logs each wait for a read."""

    def __init__(
        self, reads: list[list[Chunk]], log: list[object], fail: bool = False, tells: bool = True
    ) -> None:
        self._reads = reads
        self._log = log
        self._fail = fail  # an upstream error while it still says it has a chunk in hand
        self._left = 0
        if tells:
            self.ready = lambda: self._left

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Chunk]:
        for number, read in enumerate(self._reads):
            self._log.append(f"read {number}")
            self._left = len(read)
            for chunk in read:
                self._left -= 1
                if self._fail and self._left == 0:
                    self._left = 1
                    yield chunk
                    raise UpstreamError("gone", code="upstream_incomplete", upstream="up")
                yield chunk

    async def aclose(self) -> None:
        self._log.append("closed")


async def _relayed(stream: _Reads, log: list[object], masked: bool = False) -> None:
    exchange = Exchange("r", Endpoint.CHAT, time.monotonic(), time.monotonic() + 30, {}, b"")
    guards: tuple[RedactionGuard, ...] = ()
    if masked:
        exchange.redaction = RedactionState(RedactRules("off", "mask"), Catalog(BUILTIN).detector(), False)
        guards = (RedactionGuard(RedactionCounters()),)
    chunks = aiter(stream)
    first = await anext(chunks)
    opened = OpenStream(stream, chunks, first, None)  # type: ignore[arg-type]
    async for message in Pipeline((), Forwarder({}), guards, ()).relay(exchange, opened):
        log.append(message)


async def test_the_events_of_one_read_go_out_together_after_the_first() -> None:
    log: list[object] = []
    reads = [[_chunk(1), _chunk(2), _chunk(3)], [_chunk(4), _chunk(5)]]
    await _relayed(_Reads(reads, log), log)
    assert log == [
        "read 0",
        _event(1),  # the first at once
        _event(2) + _event(3),  # the rest of its read, before waiting for the next
        "read 1",
        _event(4) + _event(5),
        b"data: [DONE]\n\n",
        "closed",
    ]


async def test_a_stream_that_cannot_tell_what_it_has_in_hand_goes_out_chunk_by_chunk() -> None:
    log: list[object] = []
    await _relayed(_Reads([[_chunk(1), _chunk(2), _chunk(3)]], log, tells=False), log)
    assert log == ["read 0", _event(1), _event(2), _event(3), b"data: [DONE]\n\n", "closed"]


async def test_a_failure_sends_the_events_before_it_then_the_error() -> None:
    log: list[object] = []
    await _relayed(_Reads([[_chunk(1), _chunk(2), _chunk(3)]], log, fail=True), log)
    assert log[:2] == ["read 0", _event(1)]
    assert log[3] == "closed"
    assert isinstance(log[2], bytes)
    events = log[2].split(b"\n\n")
    assert events[:2] == [_event(2)[:-2], _event(3)[:-2]]
    assert orjson.loads(events[2].removeprefix(b"data: "))["error"]["code"] == "upstream_incomplete"
    assert len(log) == 4  # no [DONE]


def _text(text: str) -> Chunk:
    data = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
    return Chunk(orjson.dumps(data), data)


async def test_a_read_s_text_is_masked_once_and_goes_out_in_its_last_event() -> None:
    log: list[object] = []
    second = [" mail ", "jane", ".doe@exam", "ple.com", " now."]
    reads = [[_text("Hi")], [_text(text) for text in second]]
    await _relayed(_Reads(reads, log), log, masked=True)
    messages = [m for m in log if isinstance(m, bytes)]
    events = [[e.removeprefix(b"data: ") for e in m.split(b"\n\n") if e] for m in messages[:-1]]
    texts = [[orjson.loads(e)["choices"][0]["delta"]["content"] for e in m] for m in events]
    # The first read at once ("Hi" may still grow into an address: held), then the second
    # read's text in one event, its chunks but the last dropped; at the end, the text still
    # held ("now." may become a domain).
    assert texts == [[""], ["Hi mail [EMAIL] "], ["now."]]
    assert messages[-1] == b"data: [DONE]\n\n"
