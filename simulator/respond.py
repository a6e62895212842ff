"""Writing a chat answer: non-streamed or as SSE, with the timing model and stream faults.

Timing: ``prefill_s_per_token`` per uncached prompt token before the first token, then
``decode_s_per_token`` per completion token (spread evenly over the token-carrying events of
a stream). With both at zero nothing sleeps, and a fault-free stream is sent as one body.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from simulator.chat import ChatReply, completion_object, native_result, usage_dict, x_sim_of
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


async def answer_chat(
    request: web.Request,
    config: SimConfig,
    rec: RecordedRequest,
    completion_id: str,
    body: dict[str, Any],
    reply: ChatReply,
    prompt_tokens: int,
    cached_tokens: int,
    model: str,
    fault: Fault | None,
    wrap: bool,
) -> web.StreamResponse:
    """Answer a chat request whose reply and prompt accounting are already decided."""
    created = int(time.time())
    native = wrap and x_sim_of(body).get("native_shape") is True
    usage = usage_dict(prompt_tokens, cached_tokens, reply.completion_tokens)
    prefill_s = config.prefill_s_per_token * (prompt_tokens - cached_tokens)
    decode_s = config.decode_s_per_token * reply.completion_tokens
    if body.get("stream") is not True:
        if prefill_s + decode_s > 0:
            await asyncio.sleep(prefill_s + decode_s)
        if fault is not None and fault.kind == "malformed_chunk":
            return web.Response(body=b"{not json", content_type="application/json")
        if native:
            return json_response(envelope(native_result(reply, usage)))
        document = completion_object(reply, completion_id, created, model, usage)
        return json_response(envelope(document) if wrap else document)
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    if native:
        plan = native_stream_plan(reply, usage)
    else:
        plan = stream_plan(reply, completion_id, created, model, usage if include_usage else None)
    if fault is None and prefill_s == 0 and decode_s == 0:
        return web.Response(body=b"".join(plan.events), headers=SSE_HEADERS)
    per_event_s = decode_s / plan.token_events if plan.token_events else 0.0
    return await _write_stream(request, rec, plan, prefill_s, per_event_s, fault)


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
