"""An upstream that reports no usage (llama-cpp-python's server never does): the doors still
give their clients usage, from the gateway's own count, streamed and not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import openai_upstream
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, gateway_config, running_gateway


@pytest.fixture(scope="module")
def silent_sim() -> Iterator[RunningSimulator]:
    sim = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, profiles=("llama-cpp-python",)))
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def gateway(
    silent_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    db: Path = tmp_path_factory.mktemp("counted") / "responses.db"
    config = gateway_config(
        upstreams={"silent": openai_upstream(silent_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "silent", "model": "sim-model"}]},
        responses={"sqlite_path": str(db)},
    )
    with running_gateway(config) as running:
        yield running


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_usage_is_counted_when_the_upstream_reports_none(gateway: RunningGateway, stream: bool) -> None:
    hello = [{"role": "user", "content": "hello"}]
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key=TEST_KEY, max_retries=0) as claude,
        openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai,
    ):
        if stream:
            with claude.messages.stream(model="chat", max_tokens=64, messages=hello) as s:  # type: ignore[arg-type]
                message = s.get_final_message()
            with oai.responses.stream(model="chat", input="hello", store=False) as events:
                response = events.get_final_response()
        else:
            message = claude.messages.create(model="chat", max_tokens=64, messages=hello)  # type: ignore[arg-type]
            response = oai.responses.create(model="chat", input="hello", store=False)
    assert message.usage.output_tokens > 0
    assert message.usage.input_tokens > 0
    assert response.usage is not None
    assert response.usage.output_tokens > 0
    assert response.usage.input_tokens > 0
