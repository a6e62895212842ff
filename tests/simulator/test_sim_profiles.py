"""Server profiles: each copies what its real server does with usage, cached tokens, request ids,
concurrency, health and the context window."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simulator import PROFILES, SimConfig, Simulator
from tests.simulator.bodies import chat_body, sse_json

STREAM_USAGE = {"stream": True, "stream_options": {"include_usage": True}}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _post(
    http: aiohttp.ClientSession, sim: Simulator, body: dict[str, Any], replica: int = 0, **headers: str
) -> tuple[int, Any]:
    async with http.post(sim.urls[replica] + "/v1/chat/completions", json=body, headers=headers) as resp:
        if resp.content_type == "text/event-stream":
            return resp.status, sse_json(await resp.text())
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


def _usage_chunks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["usage"] for e in events if e.get("usage")]


async def test_profiles_are_chosen_per_replica(http: aiohttp.ClientSession) -> None:
    names = tuple(PROFILES)
    async with Simulator(SimConfig(replicas=len(names), profiles=names)) as sim:
        async with http.get(sim.url + "/_sim/stats") as resp:
            assert (await resp.json())["profiles"] == list(names)
        for replica in range(len(names)):
            status, document = await _post(http, sim, chat_body("hi", max_tokens=2), replica)
            assert status == 200 and document["choices"][0]["finish_reason"] == "length"
    with pytest.raises(ValueError, match="unknown profile"):
        SimConfig(profiles=("tgi",))
    with pytest.raises(ValueError, match="one per replica"):
        SimConfig(replicas=3, profiles=("vllm", "sglang"))


@pytest.mark.parametrize("name", ["vllm", "sglang"])
async def test_vllm_and_sglang_report_cached_tokens_only_when_enabled(
    http: aiohttp.ClientSession, name: str
) -> None:
    body = chat_body("a question that repeats")
    async with Simulator(SimConfig(replicas=2, profiles=(name,))) as plain:
        await _post(http, plain, body)
        _, document = await _post(http, plain, body)
        assert "prompt_tokens_details" not in document["usage"]
        _, streamed = await _post(http, plain, {**body, "stream": True})
        assert _usage_chunks(streamed) == []  # usage only when asked
        _, asked = await _post(http, plain, {**body, **STREAM_USAGE})
        assert len(_usage_chunks(asked)) == 1
    async with Simulator(SimConfig(profiles=(name,), cache_report=True)) as reporting:
        await _post(http, reporting, body)
        _, document = await _post(http, reporting, body)
        assert document["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    field = "stop_reason" if name == "vllm" else "matched_stop"
    assert field in document["choices"][0]
    async with Simulator(SimConfig(profiles=(name,))) as sim:
        _, stopped = await _post(http, sim, chat_body("hi", stop=" tok2"))
        assert stopped["choices"][0][field] == " tok2"


async def test_llama_server_reports_cached_tokens_and_timings(http: aiohttp.ClientSession) -> None:
    body = chat_body("the same prompt twice")
    async with Simulator(SimConfig(profiles=("llama-server",))) as sim:
        await _post(http, sim, body)
        _, document = await _post(http, sim, body)
        cached = document["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0
        assert document["timings"]["cache_n"] == cached
        assert document["timings"]["prompt_n"] == document["usage"]["prompt_tokens"] - cached
        assert document["timings"]["predicted_n"] == document["usage"]["completion_tokens"]
        _, events = await _post(http, sim, {**body, "stream": True})
        assert events[-1]["timings"]["predicted_n"] == 16


async def test_llama_cpp_python_never_sends_stream_usage_and_omits_cached_tokens(
    http: aiohttp.ClientSession,
) -> None:
    async with Simulator(SimConfig(profiles=("llama-cpp-python",))) as sim:
        status, events = await _post(http, sim, chat_body("hi", **STREAM_USAGE))
        assert status == 200 and _usage_chunks(events) == []
        assert events[-1]["choices"][0]["finish_reason"] == "stop"
        _, document = await _post(http, sim, chat_body("hi"))
        assert set(document["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}


async def test_llama_cpp_python_accepts_only_uuid_request_ids(http: aiohttp.ClientSession) -> None:
    async with Simulator(SimConfig(profiles=("llama-cpp-python",))) as sim:
        status, text = await _post(http, sim, chat_body("hi"), **{"x-request-id": "req_0123abcd"})
        assert status == 400 and "X-Request-ID" in text
        given = str(uuid.uuid4())
        async with http.post(
            sim.url + "/v1/chat/completions", json=chat_body("hi"), headers={"x-request-id": given}
        ) as resp:
            assert resp.status == 200 and resp.headers["x-request-id"] == given
        async with http.get(sim.url + "/health") as resp:
            uuid.UUID(resp.headers["x-request-id"])  # one is made up when none is sent
    async with Simulator(SimConfig(profiles=("vllm",))) as sim:
        status, _ = await _post(http, sim, chat_body("hi"), **{"x-request-id": "req_0123abcd"})
        assert status == 200


async def _finish_order(http: aiohttp.ClientSession, sim: Simulator) -> list[str]:
    """Start a long chat request, then (while it prefills) a health check and a second chat;
    the order in which the three are answered."""
    finished: list[str] = []

    async def chat(name: str, text: str) -> None:
        status, _ = await _post(http, sim, chat_body(text))
        assert status == 200
        finished.append(name)

    async def health() -> None:
        async with http.get(sim.url + "/health") as resp:
            assert resp.status == 200
        finished.append("health")

    first = asyncio.create_task(chat("long", "a long prompt"))
    while not sim.requests:  # the simulator shares this loop: once recorded, it is prefilling
        await asyncio.sleep(0.01)
    await asyncio.gather(health(), chat("second", "a second prompt"), first)
    return finished


async def test_llama_cpp_python_serves_one_request_at_a_time_and_blocks_health_in_prefill(
    http: aiohttp.ClientSession,
) -> None:
    # ~100 uncached prompt tokens at 30 ms each: a 3 s prefill
    async with Simulator(SimConfig(profiles=("llama-cpp-python",), prefill_s_per_token=0.03)) as sim:
        assert await _finish_order(http, sim) == ["long", "health", "second"]
    async with Simulator(SimConfig(profiles=("vllm",), prefill_s_per_token=0.03)) as sim:
        order = await _finish_order(http, sim)
        assert order[0] == "health"  # vLLM answers its health route during a prefill


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("vllm", "maximum context length is 131072 tokens. However, you requested 131072 output tokens"),
        ("sglang", "maximum context length is 131072 tokens"),
        ("llama-cpp-python", "in the messages, 131072 in the completion"),
    ],
)
async def test_context_window_errors_copy_each_server(
    http: aiohttp.ClientSession, name: str, fragment: str
) -> None:
    async with Simulator(SimConfig(profiles=(name,))) as sim:
        status, document = await _post(http, sim, chat_body("hi", max_tokens=131_072))
        assert status == 400
        assert fragment in document["error"]["message"]
        assert document["error"]["code"] == "context_length_exceeded"


async def test_llama_server_context_error_counts_the_prompt_alone(http: aiohttp.ClientSession) -> None:
    async with Simulator(SimConfig(profiles=("llama-server",))) as sim:
        status, _ = await _post(http, sim, chat_body("hi", max_tokens=200_000))
        assert status == 200
        huge = chat_body("x" * 600_000)
        status, document = await _post(http, sim, huge)
        assert status == 400
        assert document["error"]["type"] == "exceed_context_size_error"
        assert document["error"]["n_ctx"] == 131_072
        assert document["error"]["n_prompt_tokens"] > 131_072


async def test_llama_cpp_python_queues_a_request_behind_one_in_progress(http: aiohttp.ClientSession) -> None:
    async with Simulator(SimConfig(profiles=("llama-cpp-python",))) as sim:
        hanging = asyncio.create_task(_post(http, sim, chat_body("hold", x_sim={"fault": {"kind": "hang"}})))
        while not sim.requests:
            await asyncio.sleep(0.01)
        second = asyncio.create_task(_post(http, sim, chat_body("next")))
        await asyncio.sleep(0.3)
        assert not second.done()  # it cannot be served while the first one holds the model
        hanging.cancel()  # the client goes away: the server moves on to the next request
        with pytest.raises(asyncio.CancelledError):
            await hanging
        assert (await second)[0] == 200
