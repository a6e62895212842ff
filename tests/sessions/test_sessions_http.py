"""Sessions through a real gateway on loopback, with the simulator upstream and the real
`openai` client: the record's story, tenant isolation, the operators' listing, per-session
limits and context windows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import openai_error, openai_upstream
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway, gateway_config, running_gateway
from tests.sessions.chats import chats

ADMIN_TOKEN = "tg-test-admin-token"
PRICE = {"input": 1.0, "cached_input": 0.1, "output": 2.0}  # dollars per million tokens


def config(sim: RunningSimulator, tmp_path: Path, **overrides: Any) -> Any:
    return gateway_config(
        upstreams={"local": openai_upstream(sim.openai_base_url(0))},
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "tiered": [
                {"upstream": "local", "model": "small-window"},
                {"upstream": "local", "model": "sim-model"},
            ],
            "small": [{"upstream": "local", "model": "small-window"}],
        },
        state={"sqlite_path": str(tmp_path / "state.db")},
        admin={"tokens": [hash_key(ADMIN_TOKEN)]},
        prices={"sim-model": PRICE, "small-window": PRICE},
        context_windows={"small-window": 300, "sim-model": 4000},
        routing={"workflows": ["triage"]},
        **{"sessions": {"enabled": True}, **overrides},
    )


@pytest.fixture
def gateway(upstream: RunningSimulator, tmp_path: Path) -> Iterator[RunningGateway]:
    with running_gateway(config(upstream, tmp_path)) as running:
        yield running


def client(gateway: RunningGateway, session: str, key: str = TEST_KEY, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.base_url,
        api_key=key,
        max_retries=0,
        default_headers={"x-session-id": session, **headers},
    )


def converse(oai: openai.OpenAI, turns: int, model: str = "chat") -> list[Any]:
    history: list[Any] = [{"role": "system", "content": "You are terse."}]
    completions = []
    for n in range(turns):
        history.append({"role": "user", "content": f"question {n}: " + "tell me more " * 10})
        completion = oai.chat.completions.create(model=model, messages=history, max_tokens=8)
        history.append({"role": "assistant", "content": completion.choices[0].message.content})
        completions.append(completion)
    return completions


def test_a_session_record_tells_the_story_of_its_turns(gateway: RunningGateway) -> None:
    session = f"conv-{uuid.uuid4().hex}"
    completions = converse(client(gateway, session, **{"x-workflow": "triage"}), 3)
    found = httpx.get(f"{gateway.url}/v1/sessions/{session}", headers={"authorization": f"Bearer {TEST_KEY}"})
    assert found.status_code == 200, found.text
    record = found.json()
    assert record["turns"] == 3
    prompts = [c.usage.prompt_tokens for c in completions]
    assert record["usage"]["input_tokens"] == sum(prompts)
    assert record["usage"]["output_tokens"] == sum(c.usage.completion_tokens for c in completions)
    cached = sum((c.usage.prompt_tokens_details.cached_tokens or 0) for c in completions)
    assert record["usage"]["cached_tokens"] == cached
    assert record["cache_hit_ratio"] == round(cached / sum(prompts), 4)
    assert record["input_growth"]["last"] == prompts[2] - prompts[1]
    assert record["input_growth"]["per_turn"] == round((prompts[2] - prompts[0]) / 2, 1)
    assert record["last"] == {"model": "chat", "upstream": "local", "replica": 0}
    assert record["workflow"] == "triage"
    assert record["spend_usd"] > 0
    assert session not in found.text  # the raw id is never shown, nor stored
    assert record["session_key"] not in (None, session)


def test_another_tenants_session_is_not_found_like_one_that_does_not_exist(gateway: RunningGateway) -> None:
    session = f"conv-{uuid.uuid4().hex}"
    converse(client(gateway, session), 1)
    theirs = httpx.get(
        f"{gateway.url}/v1/sessions/{session}", headers={"authorization": f"Bearer {OTHER_TENANT_KEY}"}
    )
    missing = httpx.get(
        f"{gateway.url}/v1/sessions/never-{uuid.uuid4().hex}",
        headers={"authorization": f"Bearer {OTHER_TENANT_KEY}"},
    )
    assert openai_error(theirs, 404) == openai_error(missing, 404)
    anonymous = httpx.get(f"{gateway.url}/v1/sessions/{session}")
    assert openai_error(anonymous, 401)["code"] == "missing_api_key"


def test_operators_list_sessions_by_tokens_spend_or_last_seen(gateway: RunningGateway) -> None:
    short, long = f"short-{uuid.uuid4().hex}", f"long-{uuid.uuid4().hex}"
    converse(client(gateway, short), 1)
    converse(client(gateway, long), 3)
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    by_tokens = httpx.get(f"{gateway.url}/admin/sessions?tenant=alpha&sort=tokens&limit=2", headers=admin)
    assert by_tokens.status_code == 200, by_tokens.text
    turns = [r["turns"] for r in by_tokens.json()["data"]]
    assert turns[0] == 3
    last = httpx.get(f"{gateway.url}/admin/sessions?sort=last_seen&limit=1", headers=admin).json()["data"]
    assert last[0]["turns"] == 3  # the long conversation ended last
    wrong = httpx.get(f"{gateway.url}/admin/sessions?sort=cost", headers=admin)
    assert openai_error(wrong, 400)["param"] == "sort"
    tenant_key = httpx.get(f"{gateway.url}/admin/sessions", headers={"authorization": f"Bearer {TEST_KEY}"})
    assert openai_error(tenant_key, 401)["code"] == "invalid_admin_token"


def test_a_session_over_its_token_cap_is_refused_before_any_upstream_call(
    upstream: RunningSimulator, tmp_path: Path
) -> None:
    limited = config(
        upstream, tmp_path, tenants={"alpha": {"sessions": {"limits": {"max_tokens": 600}}}, "beta": {}}
    )
    with running_gateway(limited) as gateway:
        oai = client(gateway, f"capped-{uuid.uuid4().hex}")
        with pytest.raises(openai.RateLimitError) as refused:
            converse(oai, 10)
        assert refused.value.code == "session_budget_exceeded"
        served = len(chats(upstream))
        assert 1 <= served < 10
        again = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400},
            headers={
                "authorization": f"Bearer {TEST_KEY}",
                "x-session-id": oai.default_headers["x-session-id"],
            },
        )
        assert openai_error(again, 429)["code"] == "session_budget_exceeded"
        assert len(chats(upstream)) == served  # refused before any upstream call


def test_a_request_over_the_sessions_input_ceiling_is_refused_with_400(
    upstream: RunningSimulator, tmp_path: Path
) -> None:
    limited = config(upstream, tmp_path, sessions={"enabled": True, "limits": {"max_input_tokens": 50}})
    with running_gateway(limited) as gateway:
        body = {"model": "chat", "messages": [{"role": "user", "content": "word " * 100}]}
        refused = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {TEST_KEY}", "x-session-id": "ceiling"},
        )
        assert openai_error(refused, 400)["code"] == "context_length_exceeded"
        assert chats(upstream) == []
        no_session = httpx.post(
            f"{gateway.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {TEST_KEY}"}
        )
        assert no_session.status_code == 200  # the ceiling is a session's


def test_a_request_too_long_for_one_window_goes_to_a_longer_one_and_too_long_for_all_is_refused(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    long = {"role": "user", "content": "word " * 400}  # about 500 tokens: over small-window's 300
    served = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "tiered", "messages": [long], "max_tokens": 8},
        headers=headers,
    )
    assert served.status_code == 200, served.text
    assert [r.body["model"] for r in chats(upstream)] == ["sim-model"]
    short = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "tiered", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        headers=headers,
    )
    assert short.status_code == 200
    assert chats(upstream)[-1].body["model"] == "small-window"  # the first candidate, when it fits
    upstream.clear()
    huge = {"role": "user", "content": "word " * 4000}
    refused = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "tiered", "messages": [huge], "max_tokens": 8},
        headers=headers,
    )
    error = openai_error(refused, 400)
    assert error["code"] == "context_length_exceeded"
    assert "small-window: 300" in error["message"]
    assert "sim-model: 4000" in error["message"]
    assert chats(upstream) == []  # no upstream was called
