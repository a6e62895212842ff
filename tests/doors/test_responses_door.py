"""The Responses door with the real `openai` SDK against the gateway and the simulator: create
and stream, function calls across three turns through `previous_response_id`, the stored
responses (tenant-scoped, redacted, `store: false`), retrieve and delete, structured output,
reasoning, and what is refused."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import openai_error, recorded
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_create_answers_a_response(oai: openai.OpenAI, upstream: RunningSimulator, request_id: str) -> None:
    response = oai.responses.create(
        model="chat",
        instructions="Be brief.",
        input="hello",
        max_output_tokens=64,
        metadata={"ticket": "T-1"},
        temperature=0.5,
        extra_headers={"x-request-id": request_id},
    )
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == "chat"
    assert response.output_text.startswith("tok0 tok1")
    assert response.metadata == {"ticket": "T-1"}
    assert response.instructions == "Be brief."
    assert response.usage is not None
    assert response.usage.output_tokens == 16
    assert response.usage.total_tokens == response.usage.input_tokens + 16
    [sent] = recorded(upstream, request_id)
    assert sent.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert sent.body["max_tokens"] == 64
    assert sent.body["temperature"] == 0.5


def test_max_output_tokens_leaves_the_response_incomplete(
    oai: openai.OpenAI, upstream: RunningSimulator
) -> None:
    response = oai.responses.create(model="chat", input="hi", max_output_tokens=3, store=False)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_the_stream_helper_accumulates_the_events(oai: openai.OpenAI, upstream: RunningSimulator) -> None:
    with oai.responses.stream(model="chat", input="hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    assert final.output_text.startswith("tok0 tok1")
    assert final.status == "completed"
    assert final.usage is not None
    assert final.usage.output_tokens == 16
    stored = oai.responses.retrieve(final.id)  # the record, written from the same items
    assert stored.model_dump(exclude={"output"}) == final.model_dump(exclude={"output"})
    assert [(i.id, i.type, i.status) for i in stored.output] == [
        (i.id, i.type, i.status) for i in final.output
    ]
    assert stored.output_text == final.output_text


def test_the_raw_stream_is_the_responses_event_sequence(
    doors_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    body = {
        "model": "chat",
        "stream": True,
        "store": False,
        "tools": [WEATHER],
        "input": "go",
        "x_sim": {
            "tool_reply": "Looking.",
            "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
            "chunk_chars": 4,
        },
    }
    with httpx.stream(
        "POST",
        f"{doors_gateway.base_url}/responses",
        json=body,
        headers={"authorization": f"Bearer {TEST_KEY}"},
    ) as response:
        assert response.status_code == 200
        raw = response.read().decode()
    events = [block.split("\n") for block in raw.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    data = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert [d["type"] for d in data] == names
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-1] == "response.completed"
    added = [d["item"] for d in data if d["type"] == "response.output_item.added"]
    assert [item["type"] for item in added] == ["message", "function_call"]
    arguments = "".join(d["delta"] for d in data if d["type"] == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Oslo"}
    [done] = [d for d in data if d["type"] == "response.function_call_arguments.done"]
    assert done["arguments"] == arguments
    final = data[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["call_id"] == "call_1"
    assert final["usage"]["output_tokens"] > 0
    assert "cached_tokens" in final["usage"]["input_tokens_details"]
    assert "[DONE]" not in raw


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_function_calls_across_three_turns_with_previous_response_id(
    oai: openai.OpenAI, upstream: RunningSimulator, stream: bool
) -> None:
    def turn(**kwargs: Any) -> Any:
        if stream:
            with oai.responses.stream(model="chat", tools=[WEATHER], **kwargs) as s:
                return s.get_final_response()
        return oai.responses.create(model="chat", tools=[WEATHER], **kwargs)

    first = turn(input="what is the weather in Oslo?", instructions="Be brief.")
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    assert isinstance(json.loads(call.arguments)["city"], str)
    second = turn(
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
    )
    assert second.output_text.startswith("tok0")
    assert not [item for item in second.output if item.type == "function_call"]
    third = turn(previous_response_id=second.id, input="and the weather tomorrow?")
    assert [item.type for item in third.output] == ["function_call"]
    assert third.usage is not None
    assert third.usage.input_tokens_details.cached_tokens > 0  # the earlier turns, from the prefix cache
    assert third.previous_response_id == second.id


def test_the_stored_conversation_is_what_the_upstream_sees(
    oai: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    first = oai.responses.create(
        model="chat", instructions="Old rules.", input="what is the weather?", tools=[WEATHER]
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    oai.responses.create(
        model="chat",
        instructions="New rules.",
        previous_response_id=first.id,
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rain"}],
        extra_headers={"x-request-id": request_id},
    )
    [sent] = recorded(upstream, request_id)
    assert sent.body["messages"] == [
        {"role": "system", "content": "New rules."},  # instructions are not carried over
        {"role": "user", "content": "what is the weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "rain"},
    ]


def test_input_items_with_images_and_history(
    oai: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    oai.responses.create(
        model="chat",
        store=False,
        input=[
            {"role": "developer", "content": "Answer in French."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {
                        "type": "input_image",
                        "image_url": "https://images.example.com/cat.png",
                        "detail": "low",
                    },
                ],
            },
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A cat."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": "two"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ],
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        extra_headers={"x-request-id": request_id},
    )
    [sent] = recorded(upstream, request_id)
    calls = [
        {"id": c, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        for c in ("c1", "c2")
    ]
    assert sent.body["messages"] == [
        {"role": "developer", "content": "Answer in French."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://images.example.com/cat.png", "detail": "low"},
                },
            ],
        },
        {"role": "assistant", "content": "A cat.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    assert sent.body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent.body["parallel_tool_calls"] is False


def test_structured_output_with_a_json_schema(oai: openai.OpenAI, upstream: RunningSimulator) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}},
        "required": ["n"],
        "additionalProperties": False,
    }
    response = oai.responses.create(
        model="chat",
        input="a number",
        store=False,
        text={"format": {"type": "json_schema", "name": "number", "schema": schema, "strict": True}},
    )
    assert json.loads(response.output_text)["n"] >= 1


def test_reasoning_comes_as_a_reasoning_item(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="kimi", input="hi", reasoning={"effort": "low"}, store=False)
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output[0].content[0].text.split() == ["think0", "think1", "think2", "think3"]  # type: ignore[union-attr,index]
    with oai.responses.stream(model="kimi", input="hi", reasoning={"effort": "low"}, store=False) as stream:
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == 4


def test_retrieve_and_delete_are_tenant_scoped(
    oai: openai.OpenAI, doors_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    response = oai.responses.create(model="chat", input="hello")
    assert oai.responses.retrieve(response.id).output_text == response.output_text
    with openai.OpenAI(base_url=doors_gateway.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as other:
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.create(model="chat", input="more", previous_response_id=response.id)
    oai.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="chat", input="more", previous_response_id=response.id)


def test_store_false_stores_nothing(oai: openai.OpenAI, upstream: RunningSimulator) -> None:
    response = oai.responses.create(model="chat", input="hello", store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(response.id)


def test_stored_responses_are_redacted(
    oai: openai.OpenAI, upstream: RunningSimulator, responses_db: Path
) -> None:
    email = "jane.roe.4417@example.org"
    response = oai.responses.create(
        model="chat", input=f"mail {email} please", extra_body={"x_sim": {"echo": True}}
    )
    assert email in response.output_text  # the client gets its answer as it is
    with sqlite3.connect(responses_db) as db:
        rows = list(db.execute("SELECT key, record FROM responses"))
    stored = b"".join(bytes(record) for _, record in rows)
    assert response.id.encode() in stored  # it is there (stored before the client got it)...
    assert email.encode() not in stored  # ...redacted
    assert b"mail [EMAIL] please" in stored
    assert all(response.id not in key for key, _ in rows)  # keyed by a hash of tenant and id
    assert oai.responses.retrieve(response.id).id == response.id


def test_built_in_tools_are_refused_naming_them(doors_gateway: RunningGateway) -> None:
    response = httpx.post(
        f"{doors_gateway.base_url}/responses",
        json={
            "model": "chat",
            "input": "hi",
            "tools": [WEATHER, {"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["v"]}],
        },
        headers={"authorization": f"Bearer {TEST_KEY}"},
    )
    error = openai_error(response, 400)
    assert "web_search" in error["message"]
    assert "file_search" in error["message"]
    assert error["param"] == "tools"


def test_background_without_async_jobs_is_refused_and_cancel_finds_nothing(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="async jobs") as caught:
        oai.responses.create(model="chat", input="hi", background=True)
    assert caught.value.param == "background"
    response = oai.responses.create(model="chat", input="hi")
    with pytest.raises(openai.BadRequestError, match="background"):  # not a background response
        oai.responses.cancel(response.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.cancel("resp_unknown")


def test_models_retrieve_answers_for_the_keys_aliases(
    oai: openai.OpenAI, doors_gateway: RunningGateway
) -> None:
    assert oai.models.retrieve("kimi").id == "kimi"
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("nope")
    with openai.OpenAI(base_url=doors_gateway.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as other:
        assert other.models.retrieve("chat").id == "chat"
        with pytest.raises(openai.NotFoundError):
            other.models.retrieve("kimi")


def test_input_items_lists_the_requests_input_newest_first_and_pages(oai: openai.OpenAI) -> None:
    email = "input.items@example.org"
    turn: Any = [
        {"role": "user", "content": "first"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"mail {email}"}]},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "third"},
    ]
    response = oai.responses.create(model="chat", input=turn, max_output_tokens=8)
    listed = oai.responses.input_items.list(response.id)
    texts = [item.content[0].text for item in listed.data]  # type: ignore[union-attr]
    assert texts == ["third", "noted", "mail [EMAIL]", "first"]  # newest first; stored redacted
    assert all(item.id and item.status == "completed" for item in listed.data)  # type: ignore[union-attr]
    assert [item.role for item in listed.data] == ["user", "assistant", "user", "user"]  # type: ignore[union-attr]
    paged = list(oai.responses.input_items.list(response.id, limit=1, order="asc"))  # follows `after`
    assert [item.id for item in paged] == [item.id for item in reversed(listed.data)]
    first = oai.responses.input_items.list(response.id, limit=3)
    assert first.has_more is True and len(first.data) == 3
    one = oai.responses.input_items.list(oai.responses.create(model="chat", input="hello").id)
    assert [item.content[0].text for item in one.data] == ["hello"]  # type: ignore[union-attr]


def test_input_items_are_the_tenants_and_bad_queries_are_refused(
    oai: openai.OpenAI, doors_gateway: RunningGateway
) -> None:
    response = oai.responses.create(model="chat", input="mine")
    with (
        openai.OpenAI(base_url=doors_gateway.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as other,
        pytest.raises(openai.NotFoundError),
    ):
        other.responses.input_items.list(response.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.input_items.list("resp_unknown")
    url = f"{doors_gateway.base_url}/responses/{response.id}/input_items"
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    for query, param in (
        ("limit=0", "limit"),
        ("limit=x", "limit"),
        ("order=up", "order"),
        ("after=nope", "after"),
    ):
        assert openai_error(httpx.get(f"{url}?{query}", headers=headers), 400)["param"] == param
    assert httpx.post(url, headers=headers).status_code == 405
