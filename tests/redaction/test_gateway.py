"""Redaction through the real gateway, the real openai client and the simulator."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import openai_error, recorded
from tests.redaction.conftest import key_for
from tests.servers import RunningGateway

EMAIL, CARD, PHONE = "jane.doe@example.com", "4111 1111 1111 1111", "+1 (415) 555-2671"
SECRET_TEXT = f"Hi, I am {EMAIL}, card {CARD}, call me on {PHONE}. Thanks!"


def client(gateway: RunningGateway, tenant: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key_for(tenant), max_retries=0)


def raw(gateway: RunningGateway, tenant: str) -> httpx.Client:
    return httpx.Client(
        base_url=gateway.url, headers={"authorization": f"Bearer {key_for(tenant)}"}, timeout=30
    )


def sent_upstream(sim: RunningSimulator, request_id: str) -> dict[str, Any]:
    records = recorded(sim, request_id)
    assert len(records) == 1
    body: dict[str, Any] = records[0].body
    return body


def streamed_text(stream: Any) -> tuple[str, dict[int, str], list[str | None]]:
    text, arguments, finishes = "", {}, []
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
            finishes.append(choice.finish_reason)
    return text, arguments, finishes


def test_mask_reaches_every_text_of_a_request(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    messages = [
        {"role": "system", "content": f"Escalate to {EMAIL}."},
        {"role": "user", "content": [{"type": "text", "text": f"My card is {CARD}"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps({"phone": PHONE})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found AKIAIOSFODNN7EXAMPLE in the vault"},
        {"role": "user", "content": "thanks"},
    ]
    with client(redaction_gateway, "mask") as oai:
        oai.chat.completions.create(
            model="chat", messages=messages, extra_headers={"x-request-id": request_id}
        )
    sent = sent_upstream(upstream, request_id)
    texts = json.dumps(sent["messages"])
    for value in (EMAIL, CARD, PHONE, "AKIAIOSFODNN7EXAMPLE"):
        assert value not in texts
    assert sent["messages"][0]["content"] == "Escalate to [EMAIL]."
    assert sent["messages"][1]["content"][0]["text"] == "My card is [CREDIT_CARD]"
    assert json.loads(sent["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {"phone": "[PHONE]"}
    assert sent["messages"][3]["content"] == "found [AWS_ACCESS_KEY] in the vault"


def test_only_the_selected_kinds_are_masked(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    with client(redaction_gateway, "emailonly") as oai:
        oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": SECRET_TEXT}],
            extra_headers={"x-request-id": request_id},
        )
    assert sent_upstream(upstream, request_id)["messages"][0]["content"] == SECRET_TEXT.replace(
        EMAIL, "[EMAIL]"
    )


def test_custom_patterns_terms_and_tool_descriptions(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "page",
                "description": f"Pages the on-call engineer at {EMAIL}",
                "parameters": {
                    "type": "object",
                    "properties": {"who": {"type": "string", "description": "EMP-123456"}},
                },
            },
        }
    ]
    with client(redaction_gateway, "custom") as oai:
        oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "EMP-123456 leads project bluebird"}],
            tools=tools,  # type: ignore[arg-type]
            extra_headers={"x-request-id": request_id},
        )
    sent = sent_upstream(upstream, request_id)
    assert sent["messages"][0]["content"] == "[EMPLOYEE_ID] leads project [CODENAME]"
    function = sent["tools"][0]["function"]
    assert function["description"] == "Pages the on-call engineer at [EMAIL]"
    assert function["parameters"]["properties"]["who"]["description"] == "[EMPLOYEE_ID]"


def test_embeddings_input_is_masked(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    with client(redaction_gateway, "mask") as oai:
        oai.embeddings.create(
            model="embed", input=[f"mail {EMAIL}", "plain"], extra_headers={"x-request-id": request_id}
        )
    assert sent_upstream(upstream, request_id)["input"] == ["mail [EMAIL]", "plain"]


def test_tokenize_round_trip_not_streamed(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    with client(redaction_gateway, "tokenize") as oai:
        answer = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": SECRET_TEXT}],
            extra_body={"x_sim": {"echo": True}},
            extra_headers={"x-request-id": request_id},
        )
    seen = sent_upstream(upstream, request_id)["messages"][0]["content"]
    assert seen == "Hi, I am <EMAIL_1>, card <CREDIT_CARD_1>, call me on <PHONE_1>. Thanks!"
    assert answer.choices[0].message.content == SECRET_TEXT


@pytest.mark.parametrize("chunk_chars", [1, 2, 3, 4, 5, 7, 11, 64])
def test_tokenize_round_trip_streamed_at_any_split(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, chunk_chars: int
) -> None:
    text = f"{SECRET_TEXT} Again: {EMAIL}<{PHONE}> and a literal <EMAIL_9>."
    with client(redaction_gateway, "tokenize") as oai:
        stream = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": text}],
            stream=True,
            extra_body={"x_sim": {"echo": True, "chunk_chars": chunk_chars}},
        )
        content, _, finishes = streamed_text(stream)
    assert content == text
    assert finishes[-1] == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_arguments_are_restored_and_invented_placeholders_left_alone(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    # The call's arguments are made of what the model received: every text of the request is
    # scanned, x_sim's too, so placeholders written there would be the client's own.
    x_sim = {"tool_calls": [{"name": "send", "echo": "note"}], "chunk_chars": 3}
    text = f"mail {EMAIL} about {CARD}, cc <EMAIL_9>"
    with client(redaction_gateway, "tokenize") as oai:
        answer = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": text}],
            stream=stream,
            extra_body={"x_sim": x_sim},
        )
        if stream:
            got = json.loads(streamed_text(answer)[1][0])
        else:
            got = json.loads(answer.choices[0].message.tool_calls[0].function.arguments)  # type: ignore[union-attr,index]
    assert got == {"note": text}  # issued placeholders restored, the client's own left as written


def test_placeholders_belong_to_one_request(
    redaction_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    with client(redaction_gateway, "tokenize") as oai:
        first = oai.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": EMAIL}], extra_body={"x_sim": {"echo": True}}
        )
        second = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "hello"}],
            extra_body={"x_sim": {"reply": "<EMAIL_1>"}},
        )
    assert first.choices[0].message.content == EMAIL
    assert second.choices[0].message.content == "<EMAIL_1>"


def test_block_refuses_naming_kinds_never_values(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": SECRET_TEXT}]}
    with raw(redaction_gateway, "block") as http:
        response = http.post("/v1/chat/completions", json=body, headers={"x-request-id": request_id})
    error = openai_error(response, 400)
    assert error["code"] == "sensitive_data_blocked"
    assert all(kind in error["message"] for kind in ("CREDIT_CARD", "EMAIL", "PHONE"))
    for value in (EMAIL, CARD, PHONE, "4111"):
        assert value not in response.text
    assert response.headers["x-request-id"] == request_id
    assert recorded(upstream, request_id) == []


def test_block_lets_clean_requests_through(
    redaction_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    with client(redaction_gateway, "block") as oai:
        answer = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "hello"}],
            extra_body={"x_sim": {"reply": "hi"}},
        )
    assert answer.choices[0].message.content == "hi"


@pytest.mark.parametrize("stream", [False, True])
def test_response_mask_masks_the_models_output(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    reply = f"Reach {EMAIL} or {PHONE}; key AKIAIOSFODNN7EXAMPLE."
    with client(redaction_gateway, "mask") as oai:
        answer = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "who?"}],
            stream=stream,
            extra_body={"x_sim": {"reply": reply, "chunk_chars": 2}},
        )
        content = streamed_text(answer)[0] if stream else answer.choices[0].message.content
    assert content == "Reach [EMAIL] or [PHONE]; key [AWS_ACCESS_KEY]."


@pytest.mark.parametrize("stream", [False, True])
def test_response_block_cuts_the_answer_with_content_filter(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    with client(redaction_gateway, "outblock") as oai:
        answer = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "card?"}],
            stream=stream,
            extra_body={"x_sim": {"reply": f"Your card is {CARD}, keep it safe.", "chunk_chars": 3}},
        )
        if stream:
            content, _, finishes = streamed_text(answer)
            finish = [f for f in finishes if f][-1]
        else:
            content, finish = answer.choices[0].message.content or "", answer.choices[0].finish_reason
    assert content == "Your card is "
    assert finish == "content_filter"


def test_off_leaves_everything_alone(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    with client(redaction_gateway, "off") as oai:
        answer = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": SECRET_TEXT}],
            extra_body={"x_sim": {"echo": True}},
            extra_headers={"x-request-id": request_id},
        )
    assert sent_upstream(upstream, request_id)["messages"][0]["content"] == SECRET_TEXT
    assert answer.choices[0].message.content == SECRET_TEXT
