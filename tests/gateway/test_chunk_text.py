"""`Chunk.text_delta`: which streamed chunks are a plain text delta, the shape the guards take a
shorter way for (counting produced text, scanning a read's text once)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.chunk_shapes import TEXT_FIELDS
from gateway.exchange import Endpoint, Exchange
from gateway.metering.estimate import generated_chars
from gateway.metering.produced import ProducedText
from gateway.ports import Chunk


def chunk(choices: Any, **extra: Any) -> Chunk:
    data = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": choices, **extra}
    return Chunk(orjson.dumps(data))


PLAIN = {"index": 0, "delta": {"content": " word"}, "finish_reason": None, "logprobs": None}


@pytest.mark.parametrize(
    ("case", "choices", "extra"),
    [
        ("the simulator's and OpenAI's", [PLAIN], {}),
        ("vLLM's, with stop_reason null", [{**PLAIN, "stop_reason": None}], {}),
        ("usage null on every chunk", [PLAIN], {"usage": None}),
        ("no finish_reason or logprobs keys", [{"index": 0, "delta": {"content": "x"}}], {}),
        ("reasoning", [{"index": 0, "delta": {"reasoning_content": "hm"}}], {}),
        ("a second choice's", [{**PLAIN, "index": 1}], {}),
    ],
)
def test_a_plain_text_delta_is_recognised(case: str, choices: Any, extra: dict[str, Any]) -> None:
    found = chunk(choices, **extra).text_delta()
    assert found is not None, case
    choice, field, text = found
    assert choice is not None and choice.get("delta", {}).get(field) == text


@pytest.mark.parametrize(
    ("case", "choices", "extra"),
    [
        ("the role chunk", [{**PLAIN, "delta": {"role": "assistant", "content": ""}}], {}),
        ("an empty text", [{**PLAIN, "delta": {"content": ""}}], {}),
        ("a null text", [{**PLAIN, "delta": {"content": None}}], {}),
        ("a text that is no string", [{**PLAIN, "delta": {"content": ["x"]}}], {}),
        ("the finish", [{**PLAIN, "finish_reason": "stop"}], {}),
        ("logprobs", [{**PLAIN, "logprobs": {"content": []}}], {}),
        ("a usage", [PLAIN], {"usage": {"prompt_tokens": 1}}),
        ("two choices", [PLAIN, {**PLAIN, "index": 1}], {}),
        ("no choice", [], {}),
        ("a tool call", [{**PLAIN, "delta": {"tool_calls": [{"index": 0}]}}], {}),
        ("text and a tool call", [{**PLAIN, "delta": {"content": "x", "tool_calls": None}}], {}),
        ("another field of the choice", [{**PLAIN, "matched_stop": 2}], {}),
        ("an unknown text field", [{**PLAIN, "delta": {"contents": "x"}}], {}),
        ("a choice that is no object", ["x"], {}),
        ("choices that are an object", {"0": PLAIN}, {}),
        ("a delta that is no object", [{**PLAIN, "delta": "x"}], {}),
    ],
)
def test_anything_else_is_not(case: str, choices: Any, extra: dict[str, Any]) -> None:
    assert chunk(choices, **extra).text_delta() is None, case


_values = st.one_of(st.none(), st.just("x"), st.just(""), st.integers(0, 2), st.just({"a": 1}))
_deltas = st.dictionaries(st.sampled_from([*TEXT_FIELDS, "role", "tool_calls"]), _values, max_size=3)
_choices = st.fixed_dictionaries(
    {"index": st.integers(0, 1), "delta": st.one_of(_deltas, _values)},
    optional={"finish_reason": _values, "logprobs": _values, "stop_reason": _values},
)


@given(st.lists(_choices, max_size=2), st.one_of(st.none(), _values))
@example([{"index": 0, "delta": {"tool_calls": 1}}], None)  # an upstream's odd tool_calls: no crash
def test_produced_text_counts_the_same_whichever_way(choices: list[dict[str, Any]], usage: Any) -> None:
    extra = {} if usage is None else {"usage": usage}
    exchange = Exchange("r", Endpoint.CHAT, 0.0, 60.0, {}, b"")
    ProducedText().on_chunk(exchange, chunk(choices, **extra))
    assert exchange.produced_chars == generated_chars(choices, "delta")
