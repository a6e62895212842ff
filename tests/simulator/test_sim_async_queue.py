"""Workers AI's async queue and capacity that changes over time, end to end over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simulator import CapacityWindow, SimConfig, Simulator
from simulator.capacity import parse_spec

KIMI = "@cf/moonshotai/kimi-k2.6"


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimConfig(queue_polls=2, running_polls=1)) as simulator:
        yield simulator


def _run_url(sim: Simulator, queue: bool = True) -> str:
    url = f"{sim.workers_ai_base_url}/accounts/acc/ai/run/{KIMI}"
    return url + "?queueRequest=true" if queue else url


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with http.post(url, json=body) as resp:
        return resp.status, await resp.json()


def _batch(*texts: str) -> dict[str, Any]:
    return {
        "requests": [
            {
                "messages": [{"role": "user", "content": text}],
                "external_reference": f"ref-{i}",
                "max_tokens": i + 1,
            }
            for i, text in enumerate(texts)
        ]
    }


async def test_queue_ack_then_queued_running_and_results_out_of_order(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    texts = [f"question {i}" for i in range(6)]
    status, ack = await _post(http, _run_url(sim), _batch(*texts))
    assert status == 200 and ack["success"] is True
    assert ack["result"]["status"] == "queued" and ack["result"]["model"] == KIMI
    request_id = ack["result"]["request_id"]
    states = []
    for queue in (True, False, True):  # the poll works with and without ?queueRequest=true
        status, polled = await _post(http, _run_url(sim, queue), {"request_id": request_id})
        assert status == 200
        states.append(polled["result"]["status"])
    assert states == ["queued", "queued", "running"]
    status, done = await _post(http, _run_url(sim), {"request_id": request_id})
    result = done["result"]
    responses = result["responses"]
    assert sorted(r["id"] for r in responses) == list(range(6))
    assert [r["id"] for r in responses] != list(range(6))  # out of order: match by id
    for response in responses:
        assert response["success"] is True
        assert response["external_reference"] == f"ref-{response['id']}"
        completion = response["result"]
        assert completion["object"] == "chat.completion" and completion["model"] == KIMI
        assert completion["usage"]["completion_tokens"] == response["id"] + 1
    assert result["usage"]["completion_tokens"] == sum(range(1, 7))
    assert result["usage"]["prompt_tokens"] == sum(r["result"]["usage"]["prompt_tokens"] for r in responses)
    assert result["usage"]["total_tokens"] == result["usage"]["prompt_tokens"] + sum(range(1, 7))
    _, again = await _post(http, _run_url(sim), {"request_id": request_id})
    assert again == done


async def test_bad_items_fail_alone_and_bad_batches_are_refused(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    body = {"requests": [{"messages": [{"role": "user", "content": "ok"}]}, {"messages": "nope"}]}
    _, ack = await _post(http, _run_url(sim), body)
    done: Any = None
    for _ in range(4):
        _, done = await _post(http, _run_url(sim), {"request_id": ack["result"]["request_id"]})
    by_id = {r["id"]: r for r in done["result"]["responses"]}
    assert by_id[0]["success"] is True and by_id[1]["success"] is False
    assert by_id[1]["result"]["errors"][0]["message"]
    status, refused = await _post(http, _run_url(sim), {"requests": []})
    assert status == 400 and refused["success"] is False
    status, missing = await _post(http, _run_url(sim), {"request_id": "00000000-0000-0000-0000-000000000000"})
    assert status == 404 and missing["success"] is False


async def test_capacity_windows_refuse_sync_requests_and_hold_queued_batches(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    _, ack = await _post(http, _run_url(sim), _batch("later"))
    sim.capacity.set([CapacityWindow(0, 3600, 3040)])
    status, refused = await _post(http, _run_url(sim, queue=False), chat)
    assert status == 429 and refused["errors"][0]["code"] == 3040
    assert refused["errors"][0]["message"] == "No more data centers to forward the request to"
    status, busy = await _post(http, _run_url(sim, queue=False), {**chat, "options": {"rejectIfBusy": True}})
    assert (
        status == 429 and busy["errors"][0]["message"] == "Capacity temporarily exceeded, please try again."
    )
    async with http.post(sim.openai_base_url() + "/chat/completions", json={"model": "m", **chat}) as resp:
        assert resp.status == 429 and (await resp.json())["error"]["code"] == "3040"
    for _ in range(5):  # no capacity: the batch does not move
        _, polled = await _post(http, _run_url(sim), {"request_id": ack["result"]["request_id"]})
        assert polled["result"]["status"] == "queued"
    # the control route, as a test in another process would use it
    async with http.post(
        sim.url + "/_sim/capacity", json={"windows": [{"start_s": 0, "end_s": 60, "code": 3021}]}
    ):
        pass
    status, limited = await _post(http, _run_url(sim, queue=False), chat)
    assert status == 429 and limited["errors"][0]["code"] == 3021
    async with http.delete(sim.url + "/_sim/capacity"):
        pass
    status, _ = await _post(http, _run_url(sim, queue=False), chat)
    assert status == 200
    states = []
    for _ in range(4):
        _, polled = await _post(http, _run_url(sim), {"request_id": ack["result"]["request_id"]})
        states.append(polled["result"].get("status", "done"))
    assert states == ["queued", "queued", "running", "done"]


def test_capacity_schedule_follows_its_clock_and_repeats() -> None:
    from simulator import CapacitySchedule

    now = [100.0]
    schedule = CapacitySchedule(parse_spec("10-20,30-35:3021"), repeat_s=40, clock=lambda: now[0])
    seen = []
    for t in (0, 10, 19.9, 20, 31, 36, 50, 71):
        now[0] = 100.0 + t
        window = schedule.current()
        seen.append(window.code if window else None)
    assert seen == [None, 3040, 3040, None, 3021, None, 3040, 3021]
    with pytest.raises(ValueError, match="start_s < end_s"):
        parse_spec("5-5")
    with pytest.raises(ValueError, match="code"):
        parse_spec("1-2:999")
