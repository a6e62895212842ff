"""Server-sent events: the data of each event, whatever the line endings, extra fields and
the places the body's blocks end; and the chunks they carry, with how many are in hand."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from adapters.upstream.sse import SseChunkStream, sse_batches
from adapters.upstream.sse_events import EventTooLarge, SseEvents
from gateway.errors import UpstreamError


async def _blocks(*blocks: bytes) -> AsyncIterator[bytes]:
    for block in blocks:
        yield block


async def _events(text: bytes) -> list[bytes]:
    return [event async for batch in sse_batches(_blocks(text)) for event in batch]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
async def test_one_event_per_blank_line(newline: bytes) -> None:
    text = newline.join([b'data: {"a":1}', b"", b'data: {"b":2}', b"", b"data: [DONE]", b"", b""])
    assert await _events(text) == [b'{"a":1}', b'{"b":2}', b"[DONE]"]


async def test_multi_line_data_is_joined() -> None:
    assert await _events(b"data: first\ndata: second\n\n") == [b"first\nsecond"]


async def test_space_after_colon_is_optional_and_only_one_is_removed() -> None:
    assert await _events(b"data:tight\n\ndata:  two spaces\n\n") == [b"tight", b" two spaces"]


async def test_comments_and_other_fields_are_skipped() -> None:
    text = b": keep-alive\n\nevent: message\nid: 7\nretry: 100\ndata: payload\n\n"
    assert await _events(text) == [b"payload"]


async def test_last_event_without_a_blank_line_is_kept() -> None:
    assert await _events(b"data: one\n\ndata: tail") == [b"one", b"tail"]
    assert await _events(b"data: one\n\ndata: tail\n") == [b"one", b"tail"]


async def test_blank_lines_alone_make_no_event() -> None:
    assert await _events(b"\n\n\n") == []


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
async def test_blocks_may_end_anywhere(newline: bytes) -> None:
    text = newline.join([b'data: {"a":1}', b"", b"data: x", b"data: y", b"", b"data: [DONE]", b"", b""])
    whole = [b'{"a":1}', b"x\ny", b"[DONE]"]
    for cut in range(1, len(text)):
        for second in range(cut, len(text)):
            parser = SseEvents()
            events = parser.feed(text[:cut]) + parser.feed(text[cut:second]) + parser.feed(text[second:])
            assert events + parser.end() == whole, (cut, second)


async def test_the_events_one_block_completes_come_together() -> None:
    batches = sse_batches(_blocks(b"data: 1\n\ndata: 2\n\ndata: 3", b"\n\ndata: 4\n\n"))
    assert [batch async for batch in batches] == [[b"1", b"2"], [b"3", b"4"]]


def test_an_event_is_held_only_up_to_its_bound() -> None:
    parser = SseEvents(max_event_bytes=64)
    assert parser.feed(b"data: " + b"x" * 50 + b"\n\n") == [b"x" * 50]  # an event ends: its bytes go
    with pytest.raises(EventTooLarge):
        for _ in range(10):
            parser.feed(b"y" * 10)  # a line that never ends
    parser = SseEvents(max_event_bytes=64)
    with pytest.raises(EventTooLarge):
        for _ in range(10):
            parser.feed(b"data: " + b"z" * 10 + b"\n")  # data lines of one event that never ends


class _Response:
    """A started upstream answer whose body arrives in the given blocks."""

    def __init__(self, *blocks: bytes) -> None:
        self._blocks = blocks

    async def blocks(self) -> AsyncIterator[bytes]:
        for block in self._blocks:
            yield block

    def close(self) -> None:
        pass


def _chunk_event(n: int, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": f"t{n}"}, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode() + b"\n\n"


async def test_a_chunk_stream_says_how_many_chunks_of_the_block_in_hand_are_left() -> None:
    first = _chunk_event(1) + _chunk_event(2) + _chunk_event(3)
    second = _chunk_event(4, "stop") + b"data: [DONE]\n\n"
    stream = SseChunkStream(_Response(first, second), "up")  # type: ignore[arg-type]
    seen = [(chunk.data["choices"][0]["delta"]["content"], stream.ready()) async for chunk in stream]
    # The first chunk is handed out before the rest of its block is parsed; [DONE] is no chunk.
    assert seen == [("t1", 0), ("t2", 1), ("t3", 0), ("t4", 0)]


async def test_a_malformed_chunk_fails_the_stream_after_the_chunks_before_it_in_its_block() -> None:
    block = _chunk_event(1) + _chunk_event(2) + b"data: {not json\n\n" + _chunk_event(3)
    stream = SseChunkStream(_Response(block), "up")  # type: ignore[arg-type]
    seen: list[tuple[str, int]] = []
    with pytest.raises(UpstreamError) as caught:
        async for chunk in stream:
            seen.append((chunk.data["choices"][0]["delta"]["content"], stream.ready()))
    assert seen == [("t1", 0), ("t2", 0)]
    assert caught.value.code == "upstream_malformed_chunk"
    # In a later block too: the chunks before the malformed one, then the failure.
    stream = SseChunkStream(_Response(_chunk_event(1), block), "up")  # type: ignore[arg-type]
    seen = []
    with pytest.raises(UpstreamError):
        async for chunk in stream:
            seen.append((chunk.data["choices"][0]["delta"]["content"], stream.ready()))
    assert seen == [("t1", 0), ("t1", 1), ("t2", 0)]
