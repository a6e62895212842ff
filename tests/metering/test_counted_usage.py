"""A server that reports no usage (llama-cpp-python's ignores `stream_options.include_usage`)
is still metered: on the gateway's own count, said to be counted in every record, and a
client that asked for usage still gets it in OpenAI's format."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.state.sqlite import SQLiteStore
from gateway.audit.completion import completion_record
from gateway.exchange import Attempt, Endpoint, Exchange, Usage
from gateway.keys import hash_key
from gateway.metering.counted import counted_usage
from tests.bare_upstream import BareUpstream, bare_upstream
from tests.harness import captured_logs, eventually, openai_error
from tests.metering.test_metering_http import settled, spend_of
from tests.servers import RunningGateway, gateway_config, running_gateway

pytestmark = pytest.mark.usefixtures("one_budget_day")

KEYS = {name: f"tg-counted-{name}" for name in ("open", "tight")}
PRICE = {"input": 1000, "cached_input": 100, "output": 2000}  # micro-dollars per token
HELLO = [{"role": "user", "content": "hello"}]  # an input bound of 12 tokens (36 bytes / 3)


@pytest.fixture(scope="module")
def bare() -> Iterator[BareUpstream]:
    with bare_upstream() as server:
        yield server


@pytest.fixture
def controls(bare: BareUpstream) -> Iterator[BareUpstream]:
    bare.controls.reply = ["Hello", " there", "!"]
    bare.controls.reasoning = []
    bare.controls.tool_arguments = []
    yield bare


@pytest.fixture(scope="module")
def state_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("counted") / "state.db"


@pytest.fixture(scope="module")
def gateway(bare: BareUpstream, state_path: Path) -> Iterator[RunningGateway]:
    config = gateway_config(
        upstreams={"llama": {"kind": "openai_compat", "base_url": bare.base_url}},
        models={"chat": [{"upstream": "llama", "model": "local-model"}]},
        server={"access_log": True},
        tenants={
            "open": {},
            # 40 tokens a day: a 12-token prompt and a 3-token answer fit twice, not three times.
            "tight": {"budgets": [{"window": "day", "tokens": 40}]},
        },
        keys=[{"tenant": name, "hash": hash_key(key)} for name, key in KEYS.items()],
        prices={"local-model": PRICE},
        state={"store": "sqlite", "sqlite_path": str(state_path)},
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture
async def store(state_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(state_path)
    yield opened
    await opened.aclose()


def _client(gateway: RunningGateway, tenant: str = "open") -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEYS[tenant], max_retries=0)


def _tokens(gateway: RunningGateway, **labels: str) -> float:
    page = httpx.get(gateway.url + "/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "tollgate_tokens_total"
        and all(sample.labels.get(k) == v for k, v in labels.items())
    )


async def test_a_stream_without_usage_gets_a_counted_usage_chunk_and_is_settled_on_it(
    gateway: RunningGateway, controls: BareUpstream, store: SQLiteStore
) -> None:
    before = _tokens(gateway, tollgate_usage_source="counted", gen_ai_token_type="output")
    with _client(gateway) as client, captured_logs() as logs:
        chunks = list(
            client.chat.completions.create(
                model="chat",
                messages=HELLO,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert await settled(store, "open", 1)
        assert eventually(lambda: '"tollgate.access"' in logs.getvalue())  # written after the settle
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there!"
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    # 12 characters at 4 a token; the prompt at its input bound.
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (12, 3, 15)
    assert controls.controls.requests[-1]["stream_options"] == {"include_usage": True}
    [row] = await spend_of(store, "open")
    assert (row.prompt_tokens, row.completion_tokens) == (12, 3)
    assert row.cost_micros == 12 * 1000 + 3 * 2000
    assert _tokens(gateway, tollgate_usage_source="counted", gen_ai_token_type="output") == before + 3
    [line] = [json.loads(x) for x in logs.getvalue().splitlines() if '"tollgate.access"' in x]
    assert (line["completion_tokens"], line["usage_source"]) == (3, "counted")


def test_a_client_that_did_not_ask_gets_no_usage_chunk(
    gateway: RunningGateway, controls: BareUpstream
) -> None:
    with _client(gateway) as client:
        chunks = list(
            client.chat.completions.create(model="chat", messages=HELLO, stream=True)  # type: ignore[arg-type]
        )
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)


def test_reasoning_and_tool_call_arguments_are_counted(
    gateway: RunningGateway, controls: BareUpstream
) -> None:
    controls.controls.reply = []
    controls.controls.reasoning = ["a" * 40]  # 10 tokens
    controls.controls.tool_arguments = ['{"q": ', '"abcdefgh"}']  # 17 characters: 5 tokens
    with _client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="chat",
                messages=HELLO,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == 15


def test_a_non_streamed_answer_without_usage_gets_the_counted_usage(
    gateway: RunningGateway, controls: BareUpstream
) -> None:
    with _client(gateway) as client:
        response = client.chat.completions.create(model="chat", messages=HELLO)  # type: ignore[arg-type]
    assert response.choices[0].message.content == "Hello there!"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 3)


def test_a_hard_token_budget_holds_on_a_server_that_reports_no_usage(
    gateway: RunningGateway, controls: BareUpstream
) -> None:
    headers = {"authorization": f"Bearer {KEYS['tight']}"}
    body: dict[str, Any] = {"model": "chat", "messages": HELLO, "stream": True, "max_tokens": 3}
    statuses = []
    for _ in range(3):
        response = httpx.post(gateway.base_url + "/chat/completions", json=body, headers=headers, timeout=30)
        statuses.append(response.status_code)
        if response.status_code != 200:
            assert openai_error(response, 429)["code"] == "insufficient_quota"
    assert statuses == [200, 200, 429]


def test_the_completion_record_says_the_usage_was_counted() -> None:
    exchange = Exchange(
        request_id=uuid.uuid4().hex,
        endpoint=Endpoint.CHAT,
        received_at=0.0,
        deadline=10.0,
        headers={},
        raw_body=b"",
        body={"messages": HELLO, "max_tokens": 2},
    )
    exchange.attempts.append(Attempt("llama", "local-model", 0.0, status=200))
    exchange.produced_chars = 40
    exchange.usage = counted_usage(exchange)
    assert exchange.usage == Usage(
        prompt_tokens=12, completion_tokens=2, counted=True
    )  # capped at max_tokens
    usage = completion_record(exchange)["usage"]
    assert (usage["reported"], usage["source"], usage["completion_tokens"]) == (False, "counted", 2)
