"""The gateway's upstream contract against every server profile of the simulator: what a client
gets through the gateway must not depend on which real server stands behind it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from simulator import PROFILES, RunningSimulator, SimConfig, Simulator
from tests.harness import openai_upstream
from tests.servers import TEST_KEY, UPSTREAM_KEY, gateway_config, running_gateway

NAMES = tuple(PROFILES)
MESSAGES: list[Any] = [{"role": "user", "content": "Hello there"}]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def profiled_sim() -> Iterator[RunningSimulator]:
    """One replica per profile, in the order of ``PROFILES``."""
    sim = Simulator.start_in_thread(SimConfig(replicas=len(NAMES), profiles=NAMES, api_key=UPSTREAM_KEY))
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def profiled_client(profiled_sim: RunningSimulator) -> Iterator[openai.OpenAI]:
    config = gateway_config(
        upstreams={name: openai_upstream(profiled_sim.openai_base_url(i)) for i, name in enumerate(NAMES)},
        models={name: [{"upstream": name, "model": "@cf/moonshotai/kimi-k2.6"}] for name in NAMES},
    )
    with (
        running_gateway(config) as gateway,
        openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client,
    ):
        yield client


def _uuid_header() -> dict[str, str]:
    # a UUID is a well-formed request id for the gateway and for every profile
    return {"x-request-id": str(uuid.uuid4())}


@pytest.mark.parametrize("name", NAMES)
def test_non_stream_round_trip(profiled_client: openai.OpenAI, name: str) -> None:
    completion = profiled_client.chat.completions.create(
        model=name, messages=MESSAGES, max_tokens=64, extra_headers=_uuid_header()
    )
    assert completion.model == "@cf/moonshotai/kimi-k2.6"  # the upstream's own model field
    assert completion.choices[0].message.content == " ".join(f"tok{i}" for i in range(16))
    assert completion.choices[0].finish_reason == "stop"
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens >= 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.parametrize("name", NAMES)
def test_stream_round_trip(profiled_client: openai.OpenAI, name: str) -> None:
    stream = profiled_client.chat.completions.create(
        model=name, messages=MESSAGES, max_tokens=64, stream=True, extra_headers=_uuid_header()
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == " ".join(f"tok{i}" for i in range(16))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert all(c.usage is None for c in chunks)  # the client did not ask for usage


@pytest.mark.parametrize("name", NAMES)
def test_stream_usage_reaches_the_client(profiled_client: openai.OpenAI, name: str) -> None:
    stream = profiled_client.chat.completions.create(
        model=name,
        messages=MESSAGES,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=_uuid_header(),
    )
    usage = [c.usage for c in stream if c.usage is not None]
    assert len(usage) == 1
    assert usage[0].prompt_tokens > 0 and usage[0].completion_tokens >= 16


@pytest.mark.parametrize("name", NAMES)
def test_request_without_a_client_request_id(profiled_client: openai.OpenAI, name: str) -> None:
    completion = profiled_client.chat.completions.create(model=name, messages=MESSAGES)
    assert completion.choices[0].message.content


@pytest.mark.parametrize("name", NAMES)
def test_forced_tool_call_round_trip(profiled_client: openai.OpenAI, name: str) -> None:
    completion = profiled_client.chat.completions.create(
        model=name,
        messages=MESSAGES,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        extra_headers=_uuid_header(),
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])  # type: ignore[union-attr]


@pytest.mark.parametrize("name", [n for n in NAMES if PROFILES[n].context_window is not None])
def test_context_window_overflow_is_a_client_error(profiled_client: openai.OpenAI, name: str) -> None:
    # ~137k prompt tokens (under 1 MiB of body): above the 131,072-token windows on its own, as
    # llama-server counts the prompt alone; with max_tokens, above Kimi's 262,144 too
    too_long = [{"role": "user", "content": "word " * 110_000}]
    with pytest.raises(openai.APIStatusError) as caught:
        profiled_client.chat.completions.create(
            model=name, messages=too_long, max_tokens=200_000, extra_headers=_uuid_header()
        )
    assert 400 <= caught.value.status_code < 500
    body: Any = caught.value.body
    assert set(body) == {"message", "type", "param", "code"}
