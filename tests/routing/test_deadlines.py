"""The time allowed to the first byte grows with the prompt (prefill-heavy requests are slow to
start, not stuck) and is apart from the limit between chunks once generation runs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import openai_error, openai_upstream
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, gateway_config, running_gateway

PREFILL_S_PER_TOKEN = 0.0005  # a 4,000-token prompt takes 2 s before its first token
DECODE_S_PER_TOKEN = 0.3


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[RunningSimulator]:
    sim = Simulator.start_in_thread(
        SimConfig(
            api_key=UPSTREAM_KEY,
            prefill_s_per_token=PREFILL_S_PER_TOKEN,
            decode_s_per_token=DECODE_S_PER_TOKEN,
        )
    )
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def gateway(slow_sim: RunningSimulator) -> Iterator[RunningGateway]:
    url = slow_sim.openai_base_url(0)
    config = gateway_config(
        upstreams={
            # 0.5 s to the first byte, plus 2 s per thousand prompt tokens; 1 s between chunks.
            "grows": openai_upstream(
                url,
                timeouts={"first_byte_s": 0.5, "first_byte_per_1k_tokens_s": 2.0, "between_chunks_s": 1.0},
            ),
            "flat": openai_upstream(
                url, timeouts={"first_byte_s": 0.5, "first_byte_per_1k_tokens_s": 0, "between_chunks_s": 1.0}
            ),
            "strict-chunks": openai_upstream(url, timeouts={"between_chunks_s": 0.1}),
        },
        models={
            "grows": [{"upstream": "grows", "model": "m"}],
            "flat": [{"upstream": "flat", "model": "m"}],
            "strict-chunks": [{"upstream": "strict-chunks", "model": "m"}],
        },
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def http(gateway: RunningGateway) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=gateway.url, headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30
    ) as raw:
        yield raw


def _long_prompt() -> list[dict[str, str]]:
    # ~16 KB, ~4,000 tokens, never seen before (so none of it is cached, all of it is prefilled).
    return [{"role": "user", "content": uuid.uuid4().hex + " lorem ipsum dolor sit amet" * 600}]


def _events(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]


def test_a_long_prompt_gets_a_longer_first_byte_allowance(http: httpx.Client) -> None:
    body = {"model": "grows", "messages": _long_prompt(), "stream": True, "max_tokens": 2}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    events = _events(response)
    # Two seconds of prefill, longer than the 1 s allowed between chunks, and the stream is whole.
    assert events[-1] == "[DONE]"
    assert not any("error" in json.loads(e) for e in events[:-1])


def test_without_the_allowance_the_same_prompt_times_out(http: httpx.Client) -> None:
    body = {"model": "flat", "messages": _long_prompt(), "stream": True, "max_tokens": 2}
    assert openai_error(http.post("/v1/chat/completions", json=body), 504)["code"] == "upstream_timeout"


def test_silence_between_chunks_ends_the_stream_with_an_error_event(http: httpx.Client) -> None:
    body = {"model": "strict-chunks", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = http.post("/v1/chat/completions", json={**body, "max_tokens": 3})
    assert response.status_code == 200  # the first chunk came in time; the second did not
    events = _events(response)
    assert events[-1] != "[DONE]"
    assert json.loads(events[-1])["error"]["code"] == "upstream_timeout"
