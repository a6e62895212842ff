"""The OpenAI Agents SDK's default model class (`OpenAIResponsesModel`, the Responses API)
through the gateway: an agent calls a function tool, gets its output back and answers, with
and without `previous_response_id` chaining, streamed and not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool

from simulator import RunningSimulator
from tests.servers import TEST_KEY, RunningGateway

CALLED: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLED.append(city)
    return f"sunny in {city}"


@pytest.fixture
async def client(doors_gateway: RunningGateway) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=doors_gateway.base_url, api_key=TEST_KEY, max_retries=0) as c:
        yield c


def _agent(client: openai.AsyncOpenAI) -> Agent:
    return Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=OpenAIResponsesModel(model="chat", openai_client=client),
        tools=[get_weather],
    )


@pytest.mark.parametrize("chained", [False, True], ids=["full-history", "previous_response_id"])
async def test_an_agent_calls_its_tool_and_answers(
    client: openai.AsyncOpenAI, upstream: RunningSimulator, chained: bool
) -> None:
    CALLED.clear()
    result = await Runner.run(
        _agent(client),
        "what is the weather in Oslo?",
        run_config=RunConfig(tracing_disabled=True),
        auto_previous_response_id=chained,
    )
    assert len(CALLED) == 1
    assert result.final_output.startswith("tok0")
    calls = [item for item in result.new_items if item.type == "tool_call_item"]
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert len(calls) == len(outputs) == 1
    assert outputs[0].output == f"sunny in {CALLED[0]}"
    if chained:  # the second turn sent only the tool output; the gateway supplied the rest
        [last] = [
            r for r in list(upstream.requests) if r.body.get("messages", [{}])[-1].get("role") == "tool"
        ][-1:]
        assert [m["role"] for m in last.body["messages"]] == ["system", "user", "assistant", "tool"]


async def test_a_streamed_agent_run(client: openai.AsyncOpenAI, upstream: RunningSimulator) -> None:
    CALLED.clear()
    run = Runner.run_streamed(
        _agent(client), "what is the weather in Rome?", run_config=RunConfig(tracing_disabled=True)
    )
    kinds = [event.type async for event in run.stream_events()]
    assert "raw_response_event" in kinds
    assert len(CALLED) == 1
    assert str(run.final_output).startswith("tok0")
