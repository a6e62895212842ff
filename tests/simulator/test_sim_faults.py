"""Per-request faults (``x_sim.fault``), the server-level ``FaultPlan``, timing and disconnects."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from simulator import SimConfig, Simulator
from simulator.recording import RecordedRequest
from tests.simulator.bodies import chat_body, sse_data

CHAT = "/v1/chat/completions"


async def _eventually(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _status(http: aiohttp.ClientSession, url: str, body: dict[str, Any] | None = None) -> int:
    async with http.post(url + CHAT, json=body or chat_body("hi")) as resp:
        await resp.read()
        return resp.status


@pytest.mark.parametrize("stream", [False, True])
async def test_slow_first_token_delays_headers(
    sim: Simulator, http: aiohttp.ClientSession, stream: bool
) -> None:
    body = chat_body("hi", stream=stream, x_sim={"fault": {"kind": "slow_first_token", "delay_s": 0.3}})
    started = time.monotonic()
    async with http.post(sim.url + CHAT, json=body) as resp:
        headers_after = time.monotonic() - started
        assert resp.status == 200
        text = await resp.text()
    assert headers_after >= 0.3
    assert ("[DONE]" in text) is stream


async def test_disconnect_mid_stream(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = chat_body("hi", stream=True, x_sim={"fault": {"kind": "disconnect", "after_chunks": 3}})
    received = b""
    async with http.post(sim.url + CHAT, json=body) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for line in resp.content:
                received += line
    assert len(sse_data(received.decode())) == 3
    assert b"[DONE]" not in received
    assert not sim.requests[-1].client_disconnected


async def test_disconnect_without_stream_sends_nothing(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = chat_body("hi", x_sim={"fault": {"kind": "disconnect"}})
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await _status(http, sim.url, body)
    assert sim.requests[-1].status is None


@pytest.mark.parametrize("after", [0, 2, 100])
async def test_malformed_chunk(sim: Simulator, http: aiohttp.ClientSession, after: int) -> None:
    body = chat_body("hi", stream=True, x_sim={"fault": {"kind": "malformed_chunk", "after_chunks": after}})
    async with http.post(sim.url + CHAT, json=body) as resp:
        data = sse_data(await resp.text())
    assert data.index("{not json") == min(after, 1 + 16 + 1 + 1)
    assert data.count("{not json") == 1
    assert "[DONE]" in data


async def test_malformed_body_without_stream(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = chat_body("hi", x_sim={"fault": {"kind": "malformed_chunk"}})
    async with http.post(sim.url + CHAT, json=body) as resp:
        assert resp.status == 200
        with pytest.raises(ValueError, match="Expecting property name"):
            await resp.json()


async def test_hang_until_client_leaves(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = chat_body("hi", x_sim={"fault": {"kind": "hang"}})
    with pytest.raises(TimeoutError):
        await http.post(sim.url + CHAT, json=body, timeout=aiohttp.ClientTimeout(total=0.2))
    rec = sim.requests[-1]
    await _eventually(lambda: rec.client_disconnected)
    assert rec.status is None


async def test_hang_is_released_by_stop(http: aiohttp.ClientSession) -> None:
    sim = Simulator()
    await sim.start()
    request = asyncio.ensure_future(
        http.post(sim.url + CHAT, json=chat_body("hi", x_sim={"fault": {"kind": "hang"}}))
    )
    await _eventually(lambda: len(sim.requests) == 1)
    started = time.monotonic()
    await sim.stop()
    assert time.monotonic() - started < 1.0
    with pytest.raises(aiohttp.ClientError):
        await request
    assert not sim.requests[0].client_disconnected


async def test_client_disconnect_mid_stream_is_recorded(http: aiohttp.ClientSession) -> None:
    async with Simulator(SimConfig(decode_s_per_token=0.02)) as sim:
        async with http.post(sim.url + CHAT, json=chat_body("hi", stream=True)) as resp:
            first = await resp.content.readline()
            assert first.startswith(b"data: ")
            resp.close()  # drop the connection mid-stream
        rec: RecordedRequest = sim.requests[-1]
        await _eventually(lambda: rec.client_disconnected)
        assert rec.status == 200


async def test_timing_model(http: aiohttp.ClientSession) -> None:
    config = SimConfig(prefill_s_per_token=0.002, decode_s_per_token=0.005, default_reply_tokens=10)
    async with Simulator(config) as sim:
        started = time.monotonic()
        async with http.post(sim.url + CHAT, json=chat_body("hi")) as resp:
            usage = (await resp.json())["usage"]
        elapsed = time.monotonic() - started
        assert elapsed >= 0.002 * usage["prompt_tokens"] + 0.005 * 10
        started = time.monotonic()
        async with http.post(sim.url + CHAT, json=chat_body("hi", stream=True)) as resp:
            first_chunk_at = None
            async for _ in resp.content:
                first_chunk_at = first_chunk_at or time.monotonic() - started
        elapsed = time.monotonic() - started
        uncached = usage["prompt_tokens"] - (usage["prompt_tokens"] // 16) * 16
        assert first_chunk_at is not None and first_chunk_at >= 0.002 * uncached
        assert elapsed >= 0.002 * uncached + 0.005 * 10


async def test_zero_latency_mode_never_sleeps(
    sim: Simulator, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sleep = asyncio.sleep
    sim_sleeps: list[float] = []

    async def spy(delay: float, result: Any = None) -> Any:
        if sys._getframe(1).f_globals.get("__name__", "").startswith("simulator"):
            sim_sleeps.append(delay)
        return await real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", spy)
    for stream in (False, True):
        assert await _status(http, sim.url, chat_body("hi", stream=stream)) == 200
    assert sim_sleeps == []


async def test_fault_plan_count_and_replica(sim: Simulator, http: aiohttp.ClientSession) -> None:
    sim.faults.set({"status": 503, "code": 3040}, count=2, replica=0)
    assert [await _status(http, sim.urls[1]) for _ in range(2)] == [200, 200]
    own_fault = chat_body("hi", x_sim={"fault": {"status": 429}})
    assert await _status(http, sim.urls[0], own_fault) == 429  # takes precedence, plan not consumed
    assert [await _status(http, sim.urls[0]) for _ in range(3)] == [503, 503, 200]


async def test_fault_plan_until_cleared(sim: Simulator, http: aiohttp.ClientSession) -> None:
    sim.faults.set({"status": 500})
    assert [await _status(http, url) for url in sim.urls * 2] == [500] * 4
    sim.faults.clear()
    assert await _status(http, sim.url) == 200
    with pytest.raises(ValueError, match="kind"):
        sim.faults.set({"kind": "explode"})


async def test_down_refuses_connections_then_up_serves_again(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    assert await _status(http, sim.urls[0]) == 200  # leaves a pooled keep-alive connection
    port = sim.ports[0]
    sim.faults.down(0)
    with pytest.raises(aiohttp.ClientError):  # the pooled connection was closed by the server
        await _status(http, sim.urls[0])
    async with aiohttp.ClientSession() as fresh:
        with pytest.raises(aiohttp.ClientConnectorError):
            await _status(fresh, sim.urls[0])
        assert await _status(fresh, sim.urls[1]) == 200
    sim.faults.up(0)
    assert sim.ports[0] == port
    async with aiohttp.ClientSession() as fresh:
        assert await _status(fresh, sim.urls[0]) == 200
        async with fresh.get(sim.urls[0] + "/health") as resp:
            assert resp.status == 200
    sim.faults.down(1)
    sim.faults.clear()  # also brings replica 1 back
    assert await _status(http, sim.urls[1]) == 200


async def test_rapid_down_up_switching(sim: Simulator) -> None:
    sim.faults.down(0)
    sim.faults.up(0)
    sim.faults.down(0)  # before the listener of the up() above finished starting
    await asyncio.sleep(0.05)
    async with aiohttp.ClientSession() as fresh:
        with pytest.raises(aiohttp.ClientConnectorError):
            await _status(fresh, sim.urls[0])
    sim.faults.up(0)
    sim.faults.down(0)
    sim.faults.up(0)
    async with aiohttp.ClientSession() as fresh:
        assert await _status(fresh, sim.urls[0]) == 200


async def test_control_endpoints(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.urls[1]
    async with http.post(
        url + "/_sim/faults", json={"fault": {"status": 429, "code": 3040}, "count": 1}
    ) as resp:
        assert resp.status == 200
    async with http.post(url + "/_sim/faults", json={"fault": {"kind": "nope"}}) as resp:
        assert resp.status == 400
    assert await _status(http, sim.urls[0]) == 429
    async with http.post(url + "/_sim/faults", json={"fault": {"status": 500}}) as resp:
        assert resp.status == 200
    async with http.delete(url + "/_sim/faults") as resp:
        assert resp.status == 200
    assert await _status(http, sim.urls[0]) == 200
    async with http.post(url + "/_sim/replicas/0/down") as resp:
        assert resp.status == 200
    async with aiohttp.ClientSession() as fresh:
        with pytest.raises(aiohttp.ClientConnectorError):
            await _status(fresh, sim.urls[0])
    async with http.post(url + "/_sim/replicas/0/up") as resp:
        assert resp.status == 200
    async with http.get(url + "/_sim/stats") as resp:
        stats = await resp.json()
    assert stats["replicas"][0]["requests"] == 2 and stats["requests"] == 2 and stats["down"] == []
    async with http.get(url + "/_sim/requests") as resp:
        assert [r["status"] for r in await resp.json()] == [429, 200]
    async with http.delete(url + "/_sim/requests") as resp:
        assert resp.status == 200
    assert sim.requests == []


async def test_a_fault_on_one_first_attempt_in_three_lets_every_retry_through(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    sim.faults.set({"status": 429, "code": 3040}, every=3, first_attempts=True)
    bodies = [chat_body(f"question {i}") for i in range(9)]
    first = [await _status(http, sim.url, body) for body in bodies]
    assert first.count(429) == 3 and first.count(200) == 6
    retried = [
        await _status(http, sim.url, body)
        for body, status in zip(bodies, first, strict=True)
        if status == 429
    ]
    assert retried == [200, 200, 200]


async def test_first_attempt_faults_are_set_over_http(sim: Simulator, http: aiohttp.ClientSession) -> None:
    fault = {"fault": {"status": 503}, "every": 2, "first_attempts": True}
    async with http.post(sim.url + "/_sim/faults", json=fault) as resp:
        assert resp.status == 200
    statuses = [await _status(http, sim.url, chat_body(f"q{i}")) for i in range(4)]
    assert statuses == [200, 503, 200, 503]
    assert await _status(http, sim.url, chat_body("q1")) == 200
