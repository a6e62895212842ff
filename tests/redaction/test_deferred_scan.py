"""A streamed text delta (or a tool call's argument delta) followed by others of the same
upstream read is scanned with the read's last chunk (`Exchange.more_in_hand`): the client gets
the same text, choice by choice and field by field, as when every chunk is scanned on arrival,
in fewer events, whatever the reads' boundaries, the mode, and how fields and choices
interleave."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.exchange import Endpoint, Exchange
from gateway.policy.decision import RedactMode, RedactRules
from gateway.ports import Chunk
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN
from gateway.redaction.guard import RedactionGuard
from gateway.redaction.scrub import marker
from gateway.redaction.state import RedactionCounters, RedactionState
from gateway.redaction.window import SlidingWindow, redact_whole
from tests.redaction.test_window import DETECTOR, chunked, chunked_entities

CATALOG = Catalog(BUILTIN)
EMAIL, CARD = "jane.doe@example.com", "4111 1111 1111 1111"
_WORDS = ["Mail ", EMAIL, " or ", CARD, ", ", "jane", ".doe@", "example", ".com", " ok", "\n", "41", "11 "]


def scanned_in_reads(chunks: list[str], defers: list[bool], stop: bool = False) -> str:
    window = SlidingWindow(DETECTOR, marker, stop_at_first=stop)
    out = []
    for chunk, defer in zip(chunks, defers, strict=False):
        if defer:
            window.defer(chunk)
        else:
            out.append(window.push(chunk))
    for chunk in chunks[len(defers) :]:
        out.append(window.push(chunk))
    return "".join(out) + window.flush()


@settings(max_examples=300, deadline=None)
@given(chunked_entities(), st.lists(st.booleans()), st.booleans())
def test_a_window_given_text_unscanned_releases_what_the_whole_text_gives(
    case: tuple[str, list[str]], defers: list[bool], stop: bool
) -> None:
    text, chunks = case
    assert scanned_in_reads(chunks, defers, stop) == redact_whole(DETECTOR, text, marker, stop)


@settings(max_examples=200, deadline=None)
@given(chunked(), st.lists(st.booleans()))
def test_any_text_given_unscanned_masks_as_the_whole(case: tuple[str, list[str]], defers: list[bool]) -> None:
    text, chunks = case
    assert scanned_in_reads(chunks, defers) == redact_whole(DETECTOR, text, marker)


# A stream: text deltas of two fields and two choices, tool-call argument deltas, a finish per
# choice, then the end; each chunk with or without others of its read after it.
_delta = st.one_of(
    st.tuples(
        st.sampled_from([0, 0, 0, 1]),
        st.sampled_from(["content", "content", "reasoning_content"]),
        st.sampled_from(_WORDS),
    ),
    st.tuples(
        st.sampled_from([0, 1]),
        st.sampled_from(["tool 0", "tool 1"]),
        st.sampled_from(['{"to": "', EMAIL, '"}']),
    ),
)


def _chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> Chunk:
    data = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return Chunk(orjson.dumps(data), data)


def _stream(steps: list[tuple[int, str, str]], finish: bool) -> list[Chunk]:
    chunks = [_chunk(0, {"role": "assistant", "content": ""})]
    for index, field, text in steps:
        if field.startswith("tool"):
            call = {"index": int(field[-1]), "function": {"arguments": text}}
            chunks.append(_chunk(index, {"tool_calls": [call]}))
        else:
            chunks.append(_chunk(index, {field: text}))
    if finish:
        chunks += [_chunk(0, {}, "stop"), _chunk(1, {}, "stop")]
    return chunks


Relayed = tuple[dict[tuple[int, str], str], list[Any], int]


def relayed(mode: RedactMode, chunks: list[Chunk], more: list[bool]) -> Relayed:
    """What the client gets: per (choice, field) the text, the finish reasons, the events."""
    exchange = Exchange("req", Endpoint.CHAT, 0.0, 60.0, {}, b"")
    exchange.redaction = RedactionState(RedactRules("off", mode), CATALOG.detector(per_request=True), False)
    guard = RedactionGuard(RedactionCounters())
    out: list[Chunk] = []
    for chunk, follows in zip(chunks, more, strict=True):
        exchange.more_in_hand = follows
        out.extend(guard.on_chunk(exchange, chunk))
    exchange.more_in_hand = False
    out.extend(guard.on_end(exchange))
    texts: dict[tuple[int, str], str] = {}
    finishes = []
    for chunk in out:
        for choice in orjson.loads(chunk.encoded())["choices"]:
            delta = choice["delta"]
            for field in ("content", "reasoning_content"):
                if delta.get(field):
                    texts[(choice["index"], field)] = texts.get((choice["index"], field), "") + delta[field]
            for call in delta.get("tool_calls") or ():
                key = (choice["index"], f"tool {call['index']}")
                if arguments := call["function"].get("arguments"):  # an empty piece carries nothing
                    texts[key] = texts.get(key, "") + arguments
            if choice["finish_reason"]:
                finishes.append((choice["index"], choice["finish_reason"]))
    return texts, finishes, len(out)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_delta, max_size=24),
    st.booleans(),
    st.lists(st.booleans(), min_size=30, max_size=30),
    st.sampled_from(["mask", "block"]),
)
def test_a_stream_scanned_read_by_read_gives_the_client_the_same_text(
    steps: list[tuple[int, str, str]], finish: bool, reads: list[bool], mode: RedactMode
) -> None:
    chunks = _stream(steps, finish)
    # As the relay tells it: never the first chunk, never the last one.
    more = [False] + [reads[n] for n in range(1, len(chunks) - 1)] + ([False] if len(chunks) > 1 else [])
    by_chunk = relayed(mode, _stream(steps, finish), [False] * len(chunks))
    by_read = relayed(mode, chunks, more)
    assert by_read[0] == by_chunk[0]
    assert by_read[1] == by_chunk[1]
    assert by_read[2] <= by_chunk[2] + 1


def test_a_read_of_text_chunks_goes_out_as_one_masked_event() -> None:
    words = ["Mail ", "jane", ".doe@", "example", ".com", " now", " please"]
    chunks = [
        _chunk(0, {"role": "assistant", "content": ""}),
        *(_chunk(0, {"content": w}) for w in words),
        _chunk(0, {}, "stop"),
    ]
    more = [False] + [True] * len(words) + [False]
    texts, finishes, events = relayed("mask", chunks, more)
    assert texts == {(0, "content"): "Mail [EMAIL] now please"}
    assert finishes == [(0, "stop")]
    assert events == 2  # the first chunk alone, then the read's text in its last chunk


def test_text_taken_unscanned_goes_out_before_another_choice_s_chunk() -> None:
    chunks = [
        _chunk(0, {"role": "assistant", "content": ""}),
        _chunk(0, {"content": "call "}),
        _chunk(0, {"content": "jane.doe@exa"}),
        _chunk(1, {"content": "other, "}),  # the read's last chunk: choice 0's text goes out first
    ]
    exchange = Exchange("req", Endpoint.CHAT, 0.0, 60.0, {}, b"")
    exchange.redaction = RedactionState(RedactRules("off", "mask"), CATALOG.detector(), False)
    guard = RedactionGuard(RedactionCounters())
    out: list[Chunk] = []
    for chunk, follows in zip(chunks, [False, True, True, False], strict=True):
        exchange.more_in_hand = follows
        out.extend(guard.on_chunk(exchange, chunk))
    sent = [orjson.loads(chunk.encoded())["choices"][0] for chunk in out]
    assert [(c["index"], c["delta"].get("content")) for c in sent] == [(0, ""), (0, "call "), (1, "other, ")]
    # "jane.doe@exa" may still become an address: held until choice 0 goes on or ends.


@pytest.mark.parametrize("field", ["content", "reasoning_content"])
def test_a_block_cut_in_text_taken_unscanned_ends_the_choice(field: str) -> None:
    chunks = [
        _chunk(0, {"role": "assistant", "content": ""}),
        _chunk(0, {field: "the card "}),
        _chunk(0, {field: CARD + " and more"}),
        _chunk(0, {field: " text"}),
        _chunk(0, {}, "stop"),
    ]
    texts, finishes, _ = relayed("block", chunks, [False, True, True, True, False])
    assert texts == {(0, field): "the card "}
    assert finishes == [(0, "content_filter")]


def test_a_read_of_argument_chunks_goes_out_masked_in_its_last_event() -> None:
    pieces = ['{"to": "', "jane", ".doe@exam", "ple.com", '", "n": 1}']
    chunks = [
        _chunk(0, {"role": "assistant", "content": None}),
        _chunk(
            0, {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "mail"}}]}
        ),
        *(_chunk(0, {"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces),
        _chunk(0, {}, "tool_calls"),
    ]
    more = [False, True] + [True] * len(pieces) + [False]
    texts, finishes, events = relayed("mask", chunks, more)
    assert orjson.loads(texts[(0, "tool 0")]) == {"to": "[EMAIL]", "n": 1}
    assert finishes == [(0, "tool_calls")]
    assert events == 3  # the role chunk, the call's opening, then its arguments with the finish
