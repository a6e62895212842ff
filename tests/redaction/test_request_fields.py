"""Every text the upstream receives is redacted, wherever it sits in the body; structure and
binary payloads are left as they are."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import httpx
import pytest

from gateway.exchange import Endpoint
from gateway.redaction.request import text_slots
from simulator import RunningSimulator
from tests.harness import openai_error, recorded
from tests.redaction.conftest import key_for
from tests.servers import RunningGateway

EMAIL, CARD, SSN = "jane.doe@example.com", "4111 1111 1111 1111", "078-05-1120"
# Base64 that holds an AWS key id as plain characters: a scan of the data URL would find it.
IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG....").decode() + "AKIAIOSFODNN7EXAMPLE"
HOSTED_IMAGE = "https://img.example.com/cat.png"


def body_with_every_field() -> dict[str, Any]:
    return {
        "model": "chat",
        "user": EMAIL,
        "metadata": {"customer": f"card {CARD}", "plan": "gold"},
        "prediction": {"type": "content", "content": f"ssn {SSN}"},
        "x_vendor_notes": {"nested": [f"reach {EMAIL}"]},
        "stop": ["END"],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": f"Looks up {EMAIL}",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "name": EMAIL,
                "content": [
                    {"type": "text", "text": f"card {CARD}"},
                    {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}},
                    {"type": "image_url", "image_url": {"url": HOSTED_IMAGE}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "refusal": f"not for {EMAIL}",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"ssn": SSN})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": f"owner {EMAIL}"},
        ],
    }


def scanned(body: dict[str, Any], tool_descriptions: bool = False) -> list[tuple[Any, bool]]:
    return [
        (container[key], in_json)
        for container, key, in_json in text_slots(Endpoint.CHAT, body, tool_descriptions)
    ]


def test_the_walk_finds_every_text_and_nothing_structural() -> None:
    texts = scanned(body_with_every_field())
    assert texts == [
        (EMAIL, False),  # user
        (f"card {CARD}", False),  # metadata values (not keys)
        ("gold", False),
        (f"ssn {SSN}", False),  # prediction content
        (f"reach {EMAIL}", False),  # a field the gateway has never heard of
        ("Be brief.", False),
        (EMAIL, False),  # a message's name
        (f"card {CARD}", False),  # a text part; image parts are not text
        (f"not for {EMAIL}", False),
        (json.dumps({"ssn": SSN}), True),  # tool-call arguments are JSON text; the name is not text
        (f"owner {EMAIL}", False),
    ]
    with_descriptions = scanned(body_with_every_field(), tool_descriptions=True)
    assert (f"Looks up {EMAIL}", False) in with_descriptions
    assert len(with_descriptions) == len(texts) + 1


def test_embeddings_input_and_user_are_texts() -> None:
    body = {"model": "embed", "input": ["a", "b"], "user": EMAIL, "encoding_format": "float", "dimensions": 8}
    found = [c[k] for c, k, _ in text_slots(Endpoint.EMBEDDINGS, body, False)]
    assert found == ["a", "b", EMAIL]


def test_mask_reaches_fields_beyond_the_messages(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    body = body_with_every_field()
    sent_body = copy.deepcopy(body)
    with httpx.Client(base_url=redaction_gateway.url, timeout=30) as http:
        response = http.post(
            "/v1/chat/completions",
            json=sent_body,
            headers={"authorization": f"Bearer {key_for('mask')}", "x-request-id": request_id},
        )
    assert response.status_code == 200, response.text
    [attempt] = recorded(upstream, request_id)
    sent = attempt.body
    # Tool definitions are the developer's schema: scanned only with scan_tool_descriptions.
    everything = json.dumps({key: value for key, value in sent.items() if key != "tools"})
    for value in (EMAIL, CARD, SSN):
        assert value not in everything
    assert sent["user"] == "[EMAIL]"
    assert sent["metadata"] == {"customer": "card [CREDIT_CARD]", "plan": "gold"}
    assert sent["prediction"] == {"type": "content", "content": "ssn [US_SSN]"}
    assert sent["x_vendor_notes"] == {"nested": ["reach [EMAIL]"]}
    user = sent["messages"][1]
    assert user["name"] == "[EMAIL]"
    assert user["content"][0]["text"] == "card [CREDIT_CARD]"
    # Structure, binary payloads and hosts are untouched.
    assert user["content"][1:] == body["messages"][1]["content"][1:]
    assert sent["model"] == "sim-model" and sent["stop"] == ["END"]
    assert sent["tool_choice"] == body["tool_choice"] and sent["tools"][0]["function"]["name"] == "lookup"
    call = sent["messages"][2]["tool_calls"][0]
    assert call["function"]["name"] == "lookup" and call["id"] == "call_1"
    assert json.loads(call["function"]["arguments"]) == {"ssn": "[US_SSN]"}
    assert sent["messages"][2]["refusal"] == "not for [EMAIL]"
    assert sent["messages"][3]["tool_call_id"] == "call_1"


def test_tokenize_gives_a_field_outside_the_messages_the_same_placeholder(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    with httpx.Client(base_url=redaction_gateway.url, timeout=30) as http:
        response = http.post(
            "/v1/chat/completions",
            json={
                "model": "chat",
                "user": EMAIL,
                "metadata": {"owner": EMAIL},
                "messages": [{"role": "user", "content": f"I am {EMAIL}"}],
            },
            headers={"authorization": f"Bearer {key_for('tokenize')}", "x-request-id": request_id},
        )
    assert response.status_code == 200, response.text
    [attempt] = recorded(upstream, request_id)
    assert attempt.body["user"] == "<EMAIL_1>"
    assert attempt.body["metadata"] == {"owner": "<EMAIL_1>"}
    assert attempt.body["messages"][0]["content"] == "I am <EMAIL_1>"


@pytest.mark.parametrize(
    "extra",
    [
        {"user": EMAIL},
        {"metadata": {"customer": SSN}},
        {"messages": [{"role": "user", "name": EMAIL, "content": "hi"}]},
    ],
)
def test_block_refuses_sensitive_data_in_any_field(
    redaction_gateway: RunningGateway, upstream: RunningSimulator, request_id: str, extra: dict[str, Any]
) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], **extra}
    with httpx.Client(base_url=redaction_gateway.url, timeout=30) as http:
        response = http.post(
            "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {key_for('block')}", "x-request-id": request_id},
        )
    error = openai_error(response, 400)
    assert error["code"] == "sensitive_data_blocked"
    assert recorded(upstream, request_id) == []
