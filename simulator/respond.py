"""Writing a chat answer: non-streamed or as SSE, with the timing model and stream faults.

Timing: ``prefill_s_per_token`` per uncached prompt token before the first token, then
``decode_s_per_token`` per completion token (spread evenly over the token-carrying events of
a stream). With both at zero nothing sleeps, and a fault-free stream is sent as one body.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NamedTuple

import orjson
from aiohttp import web

from simulator.chat import ChatReply, Rendering, completion_object, native_result, usage_dict, x_sim_of
from simulator.config import SimConfig
from simulator.faults import Fault
from simulator.recording import RecordedRequest
from simulator.sse import MALFORMED, StreamPlan, native_stream_plan, stream_plan

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
DROPPED_STATUS = 499  # marks a response that was never sent because the connection was dropped


def envelope(result: Any) -> dict[str, Any]:
    """The Cloudflare ``/client/v4`` success envelope."""
    return {"result": result, "success": True, "errors": [], "messages": []}


def json_response(document: Any) -> web.Response:
    return web.Response(body=orjson.dumps(document), content_type="application/json")


def drop_connection(request: web.BaseRequest) -> web.Response:
    """Close the connection (after flushing what was written); aiohttp then sends nothing."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=DROPPED_STATUS)  # never reaches the wire


class ChatAccounting(NamedTuple):
    """The prompt side of an answer, decided before it is written (a tuple: made per request)."""

    prompt_tokens: int
    cached_tokens: int  # prefix-cache hits, whether or not the profile reports them
    reported_cached: int | None  # what ``usage.prompt_tokens_details.cached_tokens`` says (None: absent)


async def answer_chat(
    request: web.Request,
    config: SimConfig,
    rec: RecordedRequest,
    completion_id: str,
    body: dict[str, Any],
    choices: list[ChatReply],
    accounting: ChatAccounting,
    model: str,
    fault: Fault | None,
    wrap: bool,
    rendering: Rendering,
    prefill_gate: asyncio.Lock | None = None,
) -> web.StreamResponse:
    """Answer a chat request whose choices and prompt accounting are already decided.

    ``prefill_gate`` (serial profiles) is held while the prompt is prefilled: routes that wait
    on it, such as ``/health``, are blocked meanwhile, as on a server whose event loop is busy.
    """
    created = int(time.time())
    native = wrap and x_sim_of(body).get("native_shape") is True
    profile = rendering.profile
    usage = usage_dict(accounting.prompt_tokens, accounting.reported_cached, choices)
    completion_tokens = usage["completion_tokens"]
    prefill_s = config.prefill_s_per_token * (accounting.prompt_tokens - accounting.cached_tokens)
    decode_s = config.decode_s_per_token * completion_tokens
    timings = _timings(accounting, completion_tokens) if profile.timings else None
    if prefill_gate is not None and prefill_s > 0:
        async with prefill_gate:
            await asyncio.sleep(prefill_s)
        prefill_s = 0.0
    if body.get("stream") is not True:
        if prefill_s + decode_s > 0:
            await asyncio.sleep(prefill_s + decode_s)
        if fault is not None and fault.kind == "malformed_chunk":
            return web.Response(body=b"{not json", content_type="application/json")
        if native:
            return json_response(envelope(native_result(choices[0], usage)))
        document = completion_object(choices, completion_id, created, model, usage, rendering)
        if timings is not None:
            document["timings"] = timings
        return json_response(envelope(document) if wrap else document)
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    if native:
        plan = native_stream_plan(choices[0], usage)
    else:
        sent_usage = usage if include_usage and profile.stream_usage else None
        plan = stream_plan(choices, completion_id, created, model, sent_usage, rendering, timings)
    if fault is None and prefill_s == 0 and decode_s == 0:
        return web.Response(body=b"".join(plan.events), headers=SSE_HEADERS)
    per_event_s = decode_s / plan.token_events if plan.token_events else 0.0
    return await _write_stream(request, rec, plan, prefill_s, per_event_s, fault)


def _timings(accounting: ChatAccounting, completion_tokens: int) -> dict[str, Any]:
    """llama.cpp's ``timings``: prompt tokens reused from the cache, processed, predicted."""
    return {
        "cache_n": accounting.cached_tokens,
        "prompt_n": accounting.prompt_tokens - accounting.cached_tokens,
        "predicted_n": completion_tokens,
    }


async def _write_stream(
    request: web.Request,
    rec: RecordedRequest,
    plan: StreamPlan,
    prefill_s: float,
    per_event_s: float,
    fault: Fault | None,
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    rec.status = response.status  # sent now, whatever happens to the rest of the stream
    fault_at = fault.after_chunks if fault is not None and fault.kind != "slow_first_token" else -1
    try:
        if prefill_s > 0:
            await asyncio.sleep(prefill_s)
        for index, event in enumerate(plan.events):
            if index == fault_at:
                if fault is not None and fault.kind == "disconnect":
                    drop_connection(request)
                    return response
                await response.write(MALFORMED)
            if per_event_s > 0 and 1 <= index <= plan.token_events:
                await asyncio.sleep(per_event_s)
            await response.write(event)
        if fault_at >= len(plan.events):
            if fault is not None and fault.kind == "disconnect":
                drop_connection(request)
                return response
            await response.write(MALFORMED)
        await response.write_eof()
    except ConnectionResetError:
        rec.client_disconnected = True
    return response
