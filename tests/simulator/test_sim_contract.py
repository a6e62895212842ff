"""The OpenAI contract served without ``x_sim`` controls, driven by the real ``openai`` client:
``tool_choice``, parallel calls, ``n``, ``response_format``, ``stop``, token caps, reasoning,
vision parts, and reproducibility."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jsonschema
import openai
import pytest

from simulator import SimConfig, Simulator

KIMI = "@cf/moonshotai/kimi-k2.6"
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "format": "uuid"}},
                "required": ["zone"],
            },
        },
    },
    {"type": "function", "function": {"name": "send_email", "parameters": {"type": "object"}}},
]
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "item": {
            "type": "object",
            "properties": {
                "sku": {"type": "string", "pattern": "^[a-z]+$"},
                "qty": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9},
                "price": {"type": "number", "minimum": 0.5, "maximum": 2.5},
            },
            "required": ["sku", "qty"],
        }
    },
    "properties": {
        "id": {"type": "string", "format": "date-time"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 2},
        "gift": {"type": "boolean"},
        "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 3}]},
        "kind": {"const": "order"},
    },
    "required": ["id", "items", "kind"],
    "additionalProperties": False,
}


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
async def kimi() -> AsyncIterator[openai.AsyncOpenAI]:
    async with Simulator(SimConfig(profiles=("kimi",))) as simulator:
        client = openai.AsyncOpenAI(base_url=simulator.openai_base_url(), api_key="unused", max_retries=0)
        yield client
        await client.close()


async def test_auto_calls_the_fitting_tool_with_schema_valid_arguments(oai: openai.AsyncOpenAI) -> None:
    completion = await oai.chat.completions.create(
        model="m",
        messages=user("What is the weather in Lisbon?"),
        tools=TOOLS,  # type: ignore[arg-type]
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER_SCHEMA)  # type: ignore[union-attr]


async def test_auto_answers_text_when_no_tool_fits_or_after_a_tool_result(oai: openai.AsyncOpenAI) -> None:
    plain = await oai.chat.completions.create(model="m", messages=user("hello"), tools=TOOLS)  # type: ignore[arg-type]
    assert plain.choices[0].finish_reason == "stop"
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].message.content

    messages: list[Any] = [
        *user("What is the weather?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    after = await oai.chat.completions.create(model="m", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert after.choices[0].finish_reason == "stop"
    assert after.choices[0].message.tool_calls is None


async def test_parallel_calls_when_several_tools_fit_unless_disabled(oai: openai.AsyncOpenAI) -> None:
    ask = user("Tell me the weather and the time in Lisbon")
    both = await oai.chat.completions.create(model="m", messages=ask, tools=TOOLS)  # type: ignore[arg-type]
    calls = both.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]  # type: ignore[union-attr]
    assert len({c.id for c in calls}) == 2
    one = await oai.chat.completions.create(
        model="m",
        messages=ask,
        tools=TOOLS,  # type: ignore[arg-type]
        parallel_tool_calls=False,
    )
    assert [c.function.name for c in one.choices[0].message.tool_calls or []] == ["get_weather"]  # type: ignore[union-attr]


async def test_required_none_and_named_tool_choice(oai: openai.AsyncOpenAI) -> None:
    required = await oai.chat.completions.create(
        model="m",
        messages=user("hello"),
        tools=TOOLS,
        tool_choice="required",  # type: ignore[arg-type]
    )
    assert [c.function.name for c in required.choices[0].message.tool_calls or []] == ["get_weather"]  # type: ignore[union-attr]

    none = await oai.chat.completions.create(
        model="m",
        messages=user("weather please"),
        tools=TOOLS,
        tool_choice="none",  # type: ignore[arg-type]
    )
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason == "stop"

    named = await oai.chat.completions.create(
        model="m",
        messages=user("weather please"),
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    calls = named.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_time"]  # type: ignore[union-attr]
    arguments = json.loads(calls[0].function.arguments)  # type: ignore[union-attr]
    jsonschema.validate(
        arguments, TOOLS[1]["function"]["parameters"], format_checker=jsonschema.FormatChecker()
    )


async def test_named_tool_that_is_not_offered_is_a_400(oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="not in 'tools'"):
        await oai.chat.completions.create(
            model="m",
            messages=user("hi"),
            tools=TOOLS,  # type: ignore[arg-type]
            tool_choice={"type": "function", "function": {"name": "rm_rf"}},
        )


async def test_forced_call_streams_and_reassembles(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model="m",
        messages=user("hi"),
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    arguments = ""
    names = []
    finish = None
    async for chunk in stream:
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            if delta_call.function and delta_call.function.name:
                names.append(delta_call.function.name)
            arguments += (delta_call.function.arguments or "") if delta_call.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert names == ["get_weather"] and finish == "tool_calls"
    jsonschema.validate(json.loads(arguments), WEATHER_SCHEMA)


async def test_n_choices_non_stream_and_stream(oai: openai.AsyncOpenAI) -> None:
    completion = await oai.chat.completions.create(model="m", messages=user("hi"), n=3, max_tokens=4)
    assert [c.index for c in completion.choices] == [0, 1, 2]
    assert all(c.message.content == "tok0 tok1 tok2 tok3" for c in completion.choices)
    assert completion.usage is not None and completion.usage.completion_tokens == 12

    stream = await oai.chat.completions.create(
        model="m", messages=user("hi"), n=2, max_tokens=3, stream=True, stream_options={"include_usage": True}
    )
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    usage = None
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {0: "tok0 tok1 tok2", 1: "tok0 tok1 tok2"}
    assert finishes == {0: "length", 1: "length"}
    assert usage is not None and usage.completion_tokens == 6


async def test_json_schema_answers_validate_and_json_object_parses(oai: openai.AsyncOpenAI) -> None:
    completion = await oai.chat.completions.create(
        model="m",
        messages=user("an order, please"),
        n=4,
        response_format={"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER_SCHEMA}},
    )
    checker = jsonschema.FormatChecker()
    for choice in completion.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content or ""), ORDER_SCHEMA, format_checker=checker)
    as_object = await oai.chat.completions.create(
        model="m", messages=user("json"), response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(as_object.choices[0].message.content or ""), dict)


async def test_answers_are_reproducible_for_a_request_and_seed(oai: openai.AsyncOpenAI) -> None:
    async def ask(seed: int) -> list[str]:
        completion = await oai.chat.completions.create(
            model="m",
            messages=user("an order"),
            seed=seed,
            n=3,
            response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": ORDER_SCHEMA}},
        )
        return [c.message.content or "" for c in completion.choices]

    first = await ask(7)
    assert await ask(7) == first
    assert len(set(first + await ask(8))) > 1  # the seed and the choice index vary the instance


async def test_stop_and_max_completion_tokens_set_finish_reason(oai: openai.AsyncOpenAI) -> None:
    stopped = await oai.chat.completions.create(model="m", messages=user("hi"), stop=[" tok3", "never"])
    assert stopped.choices[0].message.content == "tok0 tok1 tok2"
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage is not None and stopped.usage.completion_tokens == 3
    capped = await oai.chat.completions.create(model="m", messages=user("hi"), max_completion_tokens=2)
    assert capped.choices[0].message.content == "tok0 tok1"
    assert capped.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError, match="stop"):
        await oai.chat.completions.create(model="m", messages=user("hi"), stop=["a", "b", "c", "d", "e"])


async def test_kimi_reasons_in_the_field_of_its_model(kimi: openai.AsyncOpenAI) -> None:
    k26 = await kimi.chat.completions.create(model=KIMI, messages=user("hi"))
    message = k26.choices[0].message.model_dump()
    assert message["reasoning"].startswith("think0") and "reasoning_content" not in message
    assert message["content"] == " ".join(f"tok{i}" for i in range(16))
    assert k26.usage is not None and k26.usage.completion_tokens_details is not None
    reasoning_tokens = k26.usage.completion_tokens_details.reasoning_tokens
    assert reasoning_tokens == 8 and k26.usage.completion_tokens == 16 + 8

    k25 = await kimi.chat.completions.create(model="@cf/moonshotai/kimi-k2.5", messages=user("hi"))
    assert k25.choices[0].message.model_dump()["reasoning_content"].startswith("think0")

    off = await kimi.chat.completions.create(
        model=KIMI, messages=user("hi"), extra_body={"chat_template_kwargs": {"thinking": False}}
    )
    assert "reasoning" not in off.choices[0].message.model_dump()

    stream = await kimi.chat.completions.create(model=KIMI, messages=user("hi"), stream=True, max_tokens=10)
    reasoning = content = ""
    async for chunk in stream:
        delta = chunk.choices[0].delta.model_dump()
        reasoning += delta.get("reasoning") or ""
        content += delta.get("content") or ""
    assert reasoning == " ".join(f"think{i}" for i in range(8))
    assert content == "tok0 tok1"  # the reasoning counts towards max_tokens


async def test_vision_parts_are_accepted_and_counted(oai: openai.AsyncOpenAI) -> None:
    def with_image(url: str, detail: str) -> list[Any]:
        return [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": url, "detail": detail}},
                ],
            }
        ]

    small = "data:image/png;base64," + "A" * 200
    large = "data:image/png;base64," + "A" * 200_000
    low = await oai.chat.completions.create(model="m", messages=with_image(small, "low"))
    big = await oai.chat.completions.create(model="m", messages=with_image(large, "low"))
    high = await oai.chat.completions.create(model="m", messages=with_image(small, "high"))
    assert low.usage is not None and big.usage is not None and high.usage is not None
    assert low.usage.prompt_tokens == big.usage.prompt_tokens  # an image costs its detail, not its bytes
    assert high.usage.prompt_tokens - low.usage.prompt_tokens == 765 - 85
    with pytest.raises(openai.BadRequestError, match="image_url"):
        await oai.chat.completions.create(model="m", messages=with_image("ftp://x", "low"))


async def test_kimi_context_window_is_enforced_with_the_upstream_error(kimi: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await kimi.chat.completions.create(model=KIMI, messages=user("hi"), max_tokens=262_144)
    assert "maximum context length of 262144 tokens" in str(caught.value)
    body: Any = caught.value.body
    assert body["code"] == "context_length_exceeded"
    fits = await kimi.chat.completions.create(model=KIMI, messages=user("hi"), max_tokens=200_000)
    assert fits.choices[0].finish_reason == "stop"


async def test_kimi_on_the_workers_ai_paths(http: aiohttp.ClientSession) -> None:
    async with Simulator(SimConfig(profiles=("kimi",))) as sim:
        run = f"{sim.workers_ai_base_url}/accounts/acc/ai/run/{KIMI}"
        async with http.post(run, json={"messages": user("hi"), "max_tokens": 12}) as resp:
            result = (await resp.json())["result"]
        assert result["choices"][0]["message"]["reasoning"].startswith("think0")
        assert result["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3"
        assert result["usage"]["completion_tokens_details"] == {"reasoning_tokens": 8}
        async with http.post(run, json={"messages": user("hi"), "max_tokens": 262_144}) as resp:
            assert resp.status == 400
            refused = await resp.json()
        assert refused["success"] is False
        assert "maximum context length of 262144 tokens" in refused["errors"][0]["message"]
