"""The Responses door (`POST /v1/responses`), for the `openai` SDK's `responses` and the
Agents SDK's default model.

The request becomes a chat body (`responses_request.py`), after the stored conversation of
`previous_response_id` when there is one; the guarded chat answer becomes a Response (here)
or the Responses stream events (`responses_stream.py`); errors are OpenAI's. Unless the
client sends `store: false`, the finished response is stored (`response_store.py`) before the
client gets it, for `previous_response_id`, `GET /v1/responses/{id}` and delete.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.doors.base import StreamEncoder
from gateway.doors.fields import text
from gateway.doors.input_items import input_items
from gateway.doors.openai import openai_error
from gateway.doors.response_store import ResponseRecords, StoredResponse
from gateway.doors.responses_request import chat_body, input_messages
from gateway.errors import GatewayError, InvalidRequest, NotFound
from gateway.exchange import Endpoint, Exchange, Usage
from gateway.random_ids import random_hex

logger = logging.getLogger("tollgate.doors")

PATH = "/v1/responses"
# Finish reasons that leave a response incomplete, and the reason Responses gives
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
# The defaults of two request fields a Response repeats (`echo`, in `request`, lists them all)
_NO_TOOLS: list[Any] = []
_TEXT_FORMAT: dict[str, Any] = {"format": {"type": "text"}}
# Echoed fields not sent upstream, so not redacted with the body: a job keeps them scrubbed
_UNSENT = ("metadata", "user")
BUSY = ("queued", "in_progress")  # a background response not finished yet


@dataclass(slots=True)
class ResponsesState:
    response_id: str
    created_at: int
    echo: dict[str, Any]
    store: bool
    history: list[dict[str, Any]]  # the stored conversation this one continues
    turn: list[dict[str, Any]]  # this turn's input, as chat messages
    records: ResponseRecords | None  # where it is stored, when `store`
    input: Any = None  # the request's `input` as sent, listed as items once stored


def _check_background(exchange: Exchange, store: bool, body: dict[str, Any]) -> None:
    if exchange.job_id is None:  # only a gateway with async jobs takes it as one
        raise InvalidRequest(
            "Background responses need this gateway's async jobs, which are not configured.",
            param="background",
            code="unsupported_parameter",
        )
    if not store:
        raise InvalidRequest(
            "A background response is fetched later, so it must be stored: leave out 'store: false'"
            " (or configure a responses store).",
            param="store",
            code="invalid_value",
        )
    if body.get("stream") is True:
        raise InvalidRequest(
            "A background response cannot be streamed here: leave out 'stream' and poll it "
            "(GET /v1/responses/{id}).",
            param="stream",
            code="stream_not_supported",
        )


def not_found(response_id: str, param: str | None = None) -> NotFound:
    return NotFound(
        f"No response found with id '{response_id[:64]}'.", param=param, code="response_not_found"
    )


class ResponsesDoor:
    api = "responses"
    path = PATH
    endpoint = Endpoint.CHAT
    job_prefix = "resp"  # an async job's id is the id of the Response it answers
    _encoder: Callable[[Exchange], StreamEncoder] | None = None  # the stream encoder's class

    def __init__(self, records: ResponseRecords | None, scrub: Callable[[Any], Any] | None = None) -> None:
        self.records = records  # None: nothing is stored (`store` is answered false)
        self._scrub = scrub  # what a job's echoed fields go through (None: they are not kept)

    def credential(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("authorization")

    async def request(self, body: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        history: list[dict[str, Any]] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            text(previous, "previous_response_id")
            stored = None
            if self.records is not None and exchange.principal is not None:
                stored = await self.records.load(exchange.principal, previous)
            if stored is None:
                raise not_found(previous, "previous_response_id")
            if stored.response.get("status") not in ("completed", "incomplete"):
                raise InvalidRequest(
                    f"Response '{previous[:64]}' has not completed (it is {stored.response.get('status')}): "
                    "continue it once it has.",
                    param="previous_response_id",
                    code="response_not_completed",
                )
            history = stored.messages
        turn = input_messages(body)
        chat = chat_body(body, history, turn)
        records = self.records
        store = records is not None and body.get("store") is not False
        if body.get("background") is True:
            _check_background(exchange, store, body)
        get = body.get
        # The request fields a Response repeats, with their defaults, always in this order
        echo = {
            "instructions": get("instructions"),
            "metadata": get("metadata"),
            "max_output_tokens": get("max_output_tokens"),
            "previous_response_id": previous,
            "reasoning": get("reasoning"),
            "temperature": get("temperature"),
            "top_p": get("top_p"),
            "user": get("user"),
            "tools": get("tools", _NO_TOOLS),
            "tool_choice": get("tool_choice", "auto"),
            "parallel_tool_calls": get("parallel_tool_calls", True),
            "text": get("text", _TEXT_FORMAT),
            "truncation": get("truncation", "disabled"),
            "background": get("background", False),
            "store": store,
        }
        exchange.door_state = ResponsesState(
            response_id=exchange.job_id or f"resp_{random_hex(24)}",
            created_at=int(time.time()),
            echo=echo,
            store=store,
            history=history,
            turn=turn,
            records=records,
            input=body.get("input"),
        )
        return chat

    async def response(self, exchange: Exchange, body: dict[str, Any]) -> bytes:
        choices = body.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        said = choice.get("message")
        said = said if isinstance(said, dict) else {}
        output: list[dict[str, Any]] = []
        reasoning = said.get("reasoning_content") or said.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            output.append(reasoning_item(f"rs_{random_hex(12)}", reasoning))
        content = said.get("content")
        if isinstance(content, str) and content:
            output.append(message_item(f"msg_{random_hex(12)}", content))
        for call in said.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                output.append(
                    call_item(
                        f"fc_{random_hex(12)}",
                        call.get("id") or f"call_{random_hex(12)}",
                        function.get("name") or "",
                        function.get("arguments") or "",
                    )
                )
        finish = choice.get("finish_reason")
        final = await finished(exchange, output, finish if isinstance(finish, str) else None)
        return orjson.dumps(final)

    def stream(self, exchange: Exchange) -> StreamEncoder:
        encoder = self._encoder
        if encoder is None:  # imported once, not per stream: it imports this module's helpers
            from gateway.doors.responses_stream import ResponsesStream

            encoder = self._encoder = ResponsesStream
        return encoder(exchange)

    def error(self, error: GatewayError) -> tuple[int, bytes]:
        return openai_error(error)

    def background(self, raw: bytes) -> bool:
        """Whether this (undecoded) body asks to run in the background, as an async job."""
        if b'"background"' not in raw:  # most requests: no need to parse twice
            return False
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return False  # the synchronous path answers the bad body
        return isinstance(body, dict) and body.get("background") is True

    def job_state(self, exchange: Exchange) -> dict[str, Any] | None:
        """The echoed fields (instructions as the redacted body holds them; the fields not
        sent upstream scrubbed, or dropped without a scrubber) and how many of the body's
        messages are instructions rather than conversation."""
        state: ResponsesState = exchange.door_state
        echo = dict(state.echo)
        lead = 1 if isinstance(echo["instructions"], str) and echo["instructions"] else 0
        if lead:
            echo["instructions"] = exchange.body["messages"][0]["content"]
        for name in _UNSENT:
            value = echo[name]
            echo[name] = self._scrub(value) if self._scrub is not None and value is not None else None
        # Listed once (their ids), for the queued record and the finished one alike; the job
        # keeps them scrubbed, or not at all
        state.input = items = input_items(state.input)
        return {
            "created_at": state.created_at,
            "echo": echo,
            "store": state.store,
            "lead": lead,
            "input": self._scrub(items) if self._scrub is not None and state.store else [],
        }

    def resume(self, exchange: Exchange, state: dict[str, Any] | None) -> None:
        assert state is not None  # job_state always keeps one
        exchange.door_state = ResponsesState(
            response_id=exchange.request_id,
            created_at=state["created_at"],
            echo=state["echo"],
            store=state["store"] and self.records is not None,
            history=[],
            turn=exchange.body["messages"][state["lead"] :],
            records=self.records,
            input=state.get("input", []),
        )

    async def accepted(self, exchange: Exchange) -> bytes:
        """A background response as it is answered at once: `queued`, and stored so, so that
        `GET /v1/responses/{id}` finds it before it has run."""
        state: ResponsesState = exchange.door_state
        queued = response_object(state, exchange.model_alias, "queued", [])
        assert state.records is not None and exchange.principal is not None  # background needs a store
        listed = input_items(state.input)
        await state.records.save(exchange.principal, state.response_id, StoredResponse(queued, [], listed))
        return orjson.dumps(queued)


async def finished(exchange: Exchange, output: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    """The complete Response, stored first when the client asked for it: a client may send
    the next turn (`previous_response_id`) the moment it has this one. Should the store fail,
    the client still gets its answer, marked `store: false`, and the failure is logged."""
    state: ResponsesState = exchange.door_state
    reason = INCOMPLETE.get(finish) if finish else None
    final = response_object(state, exchange.model_alias, "incomplete" if reason else "completed", output)
    final["usage"] = usage(exchange.usage)
    if reason:
        final["incomplete_details"] = {"reason": reason}
    if state.store and not await stored(exchange, final, output):
        final["store"] = False
    return final


async def stored(exchange: Exchange, final: dict[str, Any], output: list[dict[str, Any]]) -> bool:
    """Stores the finished response when the client asked for it; False when that failed
    (logged), True otherwise (stored, or nothing to store)."""
    state: ResponsesState = exchange.door_state
    if not (state.store and state.records is not None and exchange.principal is not None):
        return True
    messages = [*state.history, *state.turn, *answer_messages(output)]
    record = StoredResponse(final, messages, input_items(state.input))
    try:
        await state.records.save(exchange.principal, state.response_id, record)
    except GatewayError as exc:
        logger.warning("response not stored", extra={"request_id": exchange.request_id, "error": exc.code})
        return False
    return True


def response_object(
    state: ResponsesState, model: str, status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": state.response_id,
        "object": "response",
        "created_at": state.created_at,
        "status": status,
        "model": model,
        "output": output,
        "error": None,
        "incomplete_details": None,
        **state.echo,
        "usage": None,
    }


def message_item(item_id: str, content: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": content, "annotations": [], "logprobs": []}
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": [part]}


def reasoning_item(item_id: str, reasoning: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": reasoning}],
        "status": "completed",
    }


def call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def answer_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items as the chat messages a next turn replays (reasoning is not replayed)."""
    content = "".join(
        part["text"] for item in output if item["type"] == "message" for part in item["content"]
    )
    calls = [
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        for item in output
        if item["type"] == "function_call"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return [message]


def usage(counted: Usage) -> dict[str, Any]:
    return {
        "input_tokens": counted.prompt_tokens,
        # cache writes are not reported by the upstreams the gateway speaks to
        "input_tokens_details": {"cached_tokens": counted.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": counted.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": counted.reasoning_tokens},
        "total_tokens": counted.prompt_tokens + counted.completion_tokens,
    }
