"""Every log line written while a request is served carries its request id and trace id,
the same ids its spans and the upstream request carry."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, captured_logs, eventually, recorded
from tests.servers import TEST_KEY, RunningGateway, running_gateway
from tests.telemetry.conftest import telemetry_block, traced_config
from tests.telemetry.receiver import OtlpReceiver


@pytest.fixture(scope="module")
def logged(upstream_sim: RunningSimulator, receiver: OtlpReceiver) -> Iterator[RunningGateway]:
    config = traced_config(upstream_sim, telemetry_block(receiver.endpoint), server={"access_log": True})
    with running_gateway(config) as running:
        yield running


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    with captured_logs() as out:
        yield out


# Random hex whose digits pass the card check: a scrubbed log line would mask them.
CARD_LIKE_TRACE_ID = "c9fed51bc05a4969242448027da63f2a"


@pytest.mark.parametrize("card_like", [False, True])
@pytest.mark.parametrize("sampled", [True, False])
def test_log_lines_carry_the_request_and_trace_ids(
    logged: RunningGateway,
    upstream: RunningSimulator,
    lines: io.StringIO,
    request_id: str,
    sampled: bool,
    card_like: bool,
) -> None:
    trace_id = CARD_LIKE_TRACE_ID if card_like else os.urandom(16).hex()
    traceparent = f"00-{trace_id}-{os.urandom(8).hex()}-{'01' if sampled else '00'}"
    with openai.OpenAI(base_url=logged.base_url, api_key=TEST_KEY, max_retries=0) as client:
        client.chat.completions.create(
            model="failover",
            messages=HELLO,
            extra_headers={"x-request-id": request_id, "traceparent": traceparent},
        )

    def mine() -> list[dict[str, Any]]:
        entries = [orjson.loads(line) for line in lines.getvalue().splitlines()]
        return [e for e in entries if e.get("request_id") == request_id]

    # The access line is a finisher's: written just after the response went out.
    assert eventually(lambda: any(e["logger"] == "tollgate.access" for e in mine()))
    [sent] = recorded(upstream, request_id)
    followed = sent.headers["traceparent"].split("-")[1]
    # A trace id the scrubber would change is a client's hex that could hold a card number:
    # not followed, a new trace starts, and the client's id is written nowhere.
    assert (followed != trace_id) if card_like else (followed == trace_id)
    for entry in mine():
        assert entry["trace_id"] == followed
        assert len(entry["span_id"]) == 16
    assert trace_id not in lines.getvalue() or not card_like
