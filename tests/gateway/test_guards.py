"""The usage guard: the gateway always asks a streaming upstream for usage, and shows the
usage chunk only to clients that asked for it."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import chat_body, recorded


@pytest.mark.parametrize("client_options", [None, {"include_usage": False}])
def test_usage_asked_upstream_but_hidden_from_a_client_that_did_not_ask(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, client_options: dict[str, Any] | None
) -> None:
    extra = {} if client_options is None else {"stream_options": client_options}
    response = http.post(
        "/v1/chat/completions", json=chat_body(stream=True, **extra), headers={"x-request-id": request_id}
    )
    assert response.status_code == 200
    assert response.text.endswith("data: [DONE]\n\n")
    assert '"usage"' not in response.text
    [attempt] = recorded(upstream, request_id)
    assert attempt.body["stream_options"] == {"include_usage": True}


def test_openai_client_sees_no_usage_chunk_unless_asked(
    client: openai.OpenAI, upstream: RunningSimulator
) -> None:
    chunks = list(
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert chunks
    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)


def test_client_that_asked_gets_usage_with_cached_tokens(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    # A prompt no other test sends, long enough for several prefix-cache blocks.
    messages: Any = [
        {"role": "system", "content": f"{request_id} You are a careful assistant. " * 12},
        {"role": "user", "content": "hi"},
    ]
    cached = []
    for _ in range(2):
        chunks = list(
            client.chat.completions.create(
                model="chat",
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"x-request-id": request_id},
            )
        )
        usage = chunks[-1].usage
        assert usage is not None
        assert chunks[-1].choices == []
        assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)
        assert usage.prompt_tokens > 0
        assert usage.completion_tokens == 16
        assert usage.prompt_tokens_details is not None
        cached.append(usage.prompt_tokens_details.cached_tokens)
    assert cached[0] == 0
    assert cached[1] is not None
    assert cached[1] > 0
    assert [r.body["stream_options"] for r in recorded(upstream, request_id)] == [{"include_usage": True}] * 2
