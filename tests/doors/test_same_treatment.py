"""One conversation through the three doors gets one treatment: the same request upstream,
and the same session (affinity) key, given by the client or taken from the prompt family."""

from __future__ import annotations

import anthropic
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import recorded
from tests.servers import TEST_KEY, RunningGateway


def _through_each_door(gateway: RunningGateway, request_ids: list[str], headers: dict[str, str]) -> None:
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai,
        anthropic.Anthropic(base_url=gateway.url, api_key=TEST_KEY, max_retries=0) as claude,
    ):
        oai.chat.completions.create(
            model="chat",
            max_tokens=8,
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}],
            extra_headers={**headers, "x-request-id": request_ids[0]},
        )
        oai.responses.create(
            model="chat",
            max_output_tokens=8,
            instructions="Be brief.",
            input="hello there",
            store=False,
            extra_headers={**headers, "x-request-id": request_ids[1]},
        )
        claude.messages.create(
            model="chat",
            max_tokens=8,
            system="Be brief.",
            messages=[{"role": "user", "content": "hello there"}],
            extra_headers={**headers, "x-request-id": request_ids[2]},
        )


@pytest.mark.parametrize("session", [None, "conversation-7"], ids=["prompt-family", "x-session-id"])
def test_one_conversation_one_session_whichever_door(
    doors_gateway: RunningGateway, upstream: RunningSimulator, request_id: str, session: str | None
) -> None:
    ids = [f"{request_id}-{door}" for door in ("chat", "responses", "messages")]
    _through_each_door(doors_gateway, ids, {"x-session-id": session} if session else {})
    sent = [recorded(upstream, one) for one in ids]
    assert all(len(one) == 1 for one in sent)
    bodies = [one[0].body for one in sent]
    assert bodies[0]["messages"] == bodies[1]["messages"] == bodies[2]["messages"]
    assert bodies[0]["max_tokens"] == bodies[1]["max_tokens"] == bodies[2]["max_tokens"] == 8
    affinity = {one[0].headers.get("x-session-affinity") for one in sent}
    assert len(affinity) == 1
    assert None not in affinity
    assert session not in affinity  # scoped to the tenant and hashed, never the client's value


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_failover_serves_both_doors(
    doors_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    with (
        openai.OpenAI(base_url=doors_gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai,
        anthropic.Anthropic(base_url=doors_gateway.url, api_key=TEST_KEY, max_retries=0) as claude,
    ):
        if stream:
            with oai.responses.stream(model="dead-first", input="hi", store=False) as events:
                text = events.get_final_response().output_text
            with claude.messages.stream(
                model="dead-first", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            ) as s:
                message = s.get_final_message()
        else:
            text = oai.responses.create(model="dead-first", input="hi", store=False).output_text
            message = claude.messages.create(
                model="dead-first", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
    assert text.startswith("tok0")
    assert message.content[0].text.startswith("tok0")  # type: ignore[union-attr]
