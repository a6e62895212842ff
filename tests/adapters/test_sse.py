"""Server-sent events: the data of each event, whatever the line endings, extra fields and
the places the body's blocks end."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.upstream.sse import EventTooLarge, SseEvents, sse_batches


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
