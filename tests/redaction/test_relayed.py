"""What an upstream relays to the client follows the response mode: its error texts as well as
its content, through the real gateway, the real openai client and the simulator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.exchange import Endpoint, Exchange
from gateway.keys import hash_key
from gateway.policy.decision import RedactMode, RedactRules
from gateway.ports import Chunk
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN
from gateway.redaction.guard import RedactionGuard
from gateway.redaction.state import RedactionCounters, RedactionState
from gateway.redaction.tokens import Vault
from simulator import RunningSimulator
from tests.harness import openai_error, openai_upstream
from tests.servers import RunningGateway, gateway_config, running_gateway

EMAIL, CARD = "jane.doe@example.com", "4111 1111 1111 1111"
OTHER_EMAIL, PHONE = "bob.smith@example.org", "+1 (415) 555-2671"

TENANTS: dict[str, dict[str, Any]] = {
    "outmask": {"response": "mask"},
    "outblock": {"response": "block"},
    "tokenize": {"request": "tokenize", "response": "tokenize"},
    "outtokenize": {"response": "tokenize"},
    "off": {},
}


def key_for(tenant: str) -> str:
    return f"tg-test-relayed-{tenant}"


@pytest.fixture(scope="module")
def relayed_gateway(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0), retries=0)},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        tenants={name: {"models": ["*"], "redaction": block} for name, block in TENANTS.items()},
        keys=[{"tenant": name, "hash": hash_key(key_for(name))} for name in TENANTS],
    )
    with running_gateway(config) as running:
        yield running


def post(gateway: RunningGateway, tenant: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        return http.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key_for(tenant)}"}
        )


def rejected(message: str, stream: bool = False, status: int = 400) -> dict[str, Any]:
    """A request the simulator refuses with `status` and an error text quoting `message`."""
    fault = {"status": status, "message": f"invalid content: {message!r}"}
    return {
        "model": "chat",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
        "x_sim": {"fault": fault},
    }


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [400, 413, 422])
def test_an_upstream_error_quoting_the_request_is_masked(
    relayed_gateway: RunningGateway, upstream: RunningSimulator, stream: bool, status: int
) -> None:
    response = post(relayed_gateway, "outmask", rejected(f"mail {EMAIL}, card {CARD}", stream, status))
    error = openai_error(response, 400 if status == 422 else status)
    assert error["code"] == "upstream_rejected"
    assert EMAIL not in error["message"] and CARD not in error["message"]
    assert "mail [EMAIL], card [CREDIT_CARD]" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_is_cut_where_the_first_entity_begins_for_block(
    relayed_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    error = openai_error(post(relayed_gateway, "outblock", rejected(f"mail {EMAIL} here", stream)), 400)
    assert error["message"].endswith("invalid content: 'mail ")


def test_an_upstream_error_with_nothing_to_hide_and_a_tenant_without_redaction_pass_unchanged(
    relayed_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    clean = openai_error(post(relayed_gateway, "outmask", rejected("too many tokens")), 400)
    assert clean["message"] == "Upstream 'local' rejected the request: invalid content: 'too many tokens'"
    off = openai_error(post(relayed_gateway, "off", rejected(f"mail {EMAIL}")), 400)
    assert EMAIL in off["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_quoting_a_placeholder_gives_the_client_its_own_value_back(
    relayed_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    # The fault's text is part of the request, so the upstream quotes the placeholder it got.
    error = openai_error(post(relayed_gateway, "tokenize", rejected(f"mail {EMAIL}", stream)), 400)
    assert error["message"].endswith(f"invalid content: 'mail {EMAIL}'")


@pytest.mark.parametrize("stream", [False, True])
def test_tokenize_masks_what_the_model_wrote_on_its_own(
    relayed_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    reply = f"Write to {OTHER_EMAIL} or call {PHONE}."
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "who?"}],
        "stream": stream,
        "x_sim": {"reply": reply, "chunk_chars": 3},
    }
    response = post(relayed_gateway, "outtokenize", body)
    assert response.status_code == 200, response.text
    if stream:
        content = ""
        for line in response.text.splitlines():
            if line.startswith("data: {"):
                for choice in orjson.loads(line[6:])["choices"]:
                    content += choice["delta"].get("content") or ""
    else:
        content = response.json()["choices"][0]["message"]["content"]
    assert content == "Write to [EMAIL] or call [PHONE]."


ANSWER = f"Sent to <EMAIL_1>, cc {OTHER_EMAIL}; card {CARD}; kept <EMAIL_7>."
RESTORED = f"Sent to {EMAIL}, cc [EMAIL]; card [CREDIT_CARD]; kept <EMAIL_7>."


def guarded_exchange(request: RedactMode, response: RedactMode) -> Exchange:
    exchange = Exchange("req-guard", Endpoint.CHAT, 0.0, 60.0, {}, b"")
    exchange.redaction = RedactionState(RedactRules(request, response), Catalog(BUILTIN).detector(), False)
    return exchange


def tokenized_exchange() -> Exchange:
    exchange = guarded_exchange("tokenize", "tokenize")
    assert exchange.redaction is not None
    exchange.redaction.vault = vault = Vault()
    assert vault.placeholder("EMAIL", EMAIL) == "<EMAIL_1>"
    return exchange


def streamed(exchange: Exchange, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The choices the client gets for `deltas` (one choice each, the last one finishing)."""
    guard = RedactionGuard(RedactionCounters())
    out: list[Chunk] = []
    for n, delta in enumerate(deltas):
        finish = "stop" if n == len(deltas) - 1 else None
        choice = {
            "index": 0,
            "delta": delta,
            "finish_reason": finish,
            "logprobs": {"content": [{"token": "x"}]},
        }
        data = {"id": "x", "choices": [choice]}
        out.extend(guard.on_chunk(exchange, Chunk(orjson.dumps(data), data)))
    out.extend(guard.on_end(exchange))
    return [choice for chunk in out for choice in orjson.loads(chunk.encoded())["choices"]]


def joined(choices: list[dict[str, Any]], field: str) -> str:
    return "".join(choice["delta"].get(field) or "" for choice in choices)


def test_a_tokenize_answer_restores_what_was_issued_and_masks_the_rest() -> None:
    exchange = tokenized_exchange()
    arguments = orjson.dumps({"to": "<EMAIL_1>", "cc": OTHER_EMAIL}).decode()
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": ANSWER,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
                    ],
                },
                "finish_reason": "stop",
            }
        ]
    }
    RedactionGuard(RedactionCounters()).on_response(exchange, body)
    message = body["choices"][0]["message"]
    assert message["content"] == RESTORED
    assert orjson.loads(message["tool_calls"][0]["function"]["arguments"]) == {"to": EMAIL, "cc": "[EMAIL]"}


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 64])
def test_a_streamed_tokenize_answer_restores_and_masks_at_any_split(size: int) -> None:
    pieces = [ANSWER[i : i + size] for i in range(0, len(ANSWER), size)]
    assert joined(streamed(tokenized_exchange(), [{"content": p} for p in pieces]), "content") == RESTORED


REASONING = f"The user is {EMAIL}; their card {CARD} is on file."
LOGPROBS = {"content": [{"token": "jane", "logprob": -0.1, "bytes": [106], "top_logprobs": []}]}


def test_mask_covers_reasoning_and_refusal_and_hides_log_probabilities() -> None:
    exchange = guarded_exchange("off", "mask")
    message = {
        "role": "assistant",
        "reasoning_content": REASONING,
        "content": f"Mail {EMAIL}.",
        "refusal": EMAIL,
    }
    body = {"choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": LOGPROBS}]}
    RedactionGuard(RedactionCounters()).on_response(exchange, body)
    assert message == {
        "role": "assistant",
        "reasoning_content": "The user is [EMAIL]; their card [CREDIT_CARD] is on file.",
        "content": "Mail [EMAIL].",
        "refusal": "[EMAIL]",
    }
    assert body["choices"][0]["logprobs"] is None  # tokens would spell the values out


@pytest.mark.parametrize("size", [1, 3, 7, 64])
def test_a_streamed_reasoning_is_masked_at_any_split(size: int) -> None:
    pieces = [REASONING[i : i + size] for i in range(0, len(REASONING), size)]
    choices = streamed(
        guarded_exchange("off", "mask"), [{"reasoning_content": p} for p in pieces] + [{"content": EMAIL}]
    )
    assert joined(choices, "reasoning_content") == "The user is [EMAIL]; their card [CREDIT_CARD] is on file."
    assert joined(choices, "content") == "[EMAIL]"
    assert all(choice.get("logprobs") is None for choice in choices)


@pytest.mark.parametrize("stream", [False, True])
def test_block_cut_in_the_reasoning_withholds_the_answer(stream: bool) -> None:
    exchange = guarded_exchange("off", "block")
    if stream:
        choices = streamed(
            exchange,
            [{"reasoning_content": REASONING[:20]}, {"reasoning_content": REASONING[20:]}, {"content": "ok"}],
        )
        reasoning, content = joined(choices, "reasoning_content"), joined(choices, "content")
        finish = [c["finish_reason"] for c in choices if c["finish_reason"]][-1]
    else:
        message = {"role": "assistant", "reasoning_content": REASONING, "content": "The answer."}
        body = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        RedactionGuard(RedactionCounters()).on_response(exchange, body)
        reasoning, content = message["reasoning_content"], message["content"] or ""
        finish = body["choices"][0]["finish_reason"]
    assert reasoning == "The user is "
    assert content == ""
    assert finish == "content_filter"
