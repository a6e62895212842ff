"""The HTTP surface of one replica: OpenAI ``/v1`` and Cloudflare Workers AI ``/client/v4``."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, Literal

import orjson
from aiohttp import web

from simulator import async_queue
from simulator.answers import BadRequest, reasoning_field
from simulator.chat import Rendering, completion_object, message_of, messages_of, usage_dict, x_sim_of
from simulator.context_window import context_error, overflow
from simulator.control import control_routes
from simulator.embeddings import native_embeddings, openai_embeddings
from simulator.errors import ErrorFormat, error_response
from simulator.faults import Fault, parse_fault
from simulator.recording import RecordedRequest
from simulator.request_ids import echo_request_id, uuid_request_ids
from simulator.respond import (
    DROPPED_STATUS,
    ChatAccounting,
    answer_chat,
    drop_connection,
    envelope,
    json_response,
)
from simulator.state import CacheSlot, SimState
from simulator.tokens import block_keys, count_bytes_tokens, prompt_bytes
from simulator.vision import counted_messages

Kind = Literal["chat", "embeddings", "run"]
WORKERS_AI_PREFIX = "/client/v4/accounts/{account_id}/ai"
MAX_BODY_BYTES = 64 * 1024 * 1024
_OK = orjson.dumps({"status": "ok"})


class ReplicaApp:
    """Builds the aiohttp application served by replica ``replica``."""

    def __init__(self, state: SimState, replica: int) -> None:
        self.state = state
        self.replica = replica
        self.profile = state.profiles[replica]
        # one per reasoning field, made once: the answer path only picks one
        self._renderings = {
            field: Rendering(self.profile, field) for field in ("reasoning", "reasoning_content")
        }
        key = state.config.api_key
        self._expected_auth = f"Bearer {key}".encode() if key is not None else None

    def build(self) -> web.Application:
        middlewares = [uuid_request_ids] if self.profile.uuid_request_ids else []
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
        if middlewares:
            app.on_response_prepare.append(echo_request_id)
        router = app.router
        router.add_get("/health", self.health)
        router.add_get("/v1/models", self.models)
        router.add_post("/v1/chat/completions", self.openai_chat)
        router.add_post("/v1/embeddings", self.openai_embeddings)
        router.add_post(WORKERS_AI_PREFIX + "/v1/chat/completions", self.workers_ai_chat)
        router.add_post(WORKERS_AI_PREFIX + "/v1/embeddings", self.workers_ai_embeddings)
        router.add_post(WORKERS_AI_PREFIX + "/run/{model:.*}", self.workers_ai_run)
        router.add_get(WORKERS_AI_PREFIX + "/models/search", self.workers_ai_models)
        app.add_routes(control_routes(self.state, self.replica))
        return app

    async def health(self, request: web.Request) -> web.Response:
        """200 ``{"status":"ok"}``; 503 on a down replica (reachable only over an old connection)."""
        rec = self._record(request, None)
        await self._wait_for_loop()
        if self.state.down[self.replica]:
            response = web.Response(status=503, body=b'{"status":"down"}', content_type="application/json")
        else:
            response = web.Response(body=_OK, content_type="application/json")
        rec.status = response.status
        return response

    async def models(self, request: web.Request) -> web.Response:
        rec = self._record(request, None)
        await self._wait_for_loop()
        if not self._authorized(request):
            rec.status = 401
            return error_response(ErrorFormat.OPENAI, 401, "Incorrect API key provided")
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "tollgate-sim"}
            for m in self.state.config.models
        ]
        rec.status = 200
        return json_response({"object": "list", "data": data})

    async def workers_ai_models(self, request: web.Request) -> web.Response:
        """Cloudflare's model search, enveloped; the gateway uses it as a health probe."""
        rec = self._record(request, None)
        if not self._authorized(request):
            rec.status = 401
            return error_response(ErrorFormat.WORKERS_AI, 401, "Authentication error")
        result = [{"name": m, "task": {"name": "Text Generation"}} for m in self.state.config.models]
        rec.status = 200
        return json_response(envelope(result))

    async def openai_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._inference(request, ErrorFormat.OPENAI, "chat", workers_ai=False)

    async def openai_embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._inference(request, ErrorFormat.OPENAI, "embeddings", workers_ai=False)

    async def workers_ai_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._inference(request, ErrorFormat.WORKERS_AI, "chat", workers_ai=True)

    async def workers_ai_embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._inference(request, ErrorFormat.WORKERS_AI, "embeddings", workers_ai=True)

    async def workers_ai_run(self, request: web.Request) -> web.StreamResponse:
        return await self._inference(request, ErrorFormat.WORKERS_AI, "run", workers_ai=True)

    async def _wait_for_loop(self) -> None:
        """A serial profile's server answers nothing while its event loop prefills a prompt."""
        if self.profile.serial:
            async with self.state.prefill_gates[self.replica]:
                pass

    def _record(self, request: web.Request, body: Any) -> RecordedRequest:
        rec = RecordedRequest(
            replica=self.replica,
            method=request.method,
            path=request.path,
            headers={name.lower(): value for name, value in request.headers.items()},
            body=body,
            query=dict(request.query) if request.query_string else {},
        )
        self.state.requests.append(rec)
        return rec

    def _authorized(self, request: web.Request) -> bool:
        if self._expected_auth is None:
            return True
        given = request.headers.get("Authorization", "").encode()
        return secrets.compare_digest(given, self._expected_auth)

    async def _inference(
        self, request: web.Request, fmt: ErrorFormat, kind: Kind, workers_ai: bool
    ) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        malformed = False
        if raw:
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                malformed = True
        rec = self._record(request, body)
        self.state.replicas[self.replica].stats.requests += 1
        busy = self.state.busy[self.replica]
        busy.add(request.protocol)
        try:
            if self.profile.serial:
                async with self.state.serial[self.replica]:
                    response = await self._answer(request, rec, fmt, kind, workers_ai, body, malformed)
            else:
                response = await self._answer(request, rec, fmt, kind, workers_ai, body, malformed)
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client's connection is lost
            # (handler_cancellation=True); a stopping simulator cancels it too.
            if not self.state.stopping.is_set():
                rec.client_disconnected = True
            raise
        finally:
            busy.discard(request.protocol)
        rec.status = None if response.status == DROPPED_STATUS else response.status
        return response

    async def _answer(
        self,
        request: web.Request,
        rec: RecordedRequest,
        fmt: ErrorFormat,
        kind: Kind,
        workers_ai: bool,
        body: Any,
        malformed: bool,
    ) -> web.StreamResponse:
        state = self.state
        if state.down[self.replica]:
            return drop_connection(request)
        if not self._authorized(request):
            message = (
                "Authentication error" if fmt is ErrorFormat.WORKERS_AI else "Incorrect API key provided"
            )
            return error_response(fmt, 401, message)
        if malformed or not isinstance(body, dict):
            what = "is not valid JSON" if malformed else "must be a JSON object"
            return error_response(fmt, 400, f"request body {what}")
        try:
            x_sim = x_sim_of(body)
            raw_fault = x_sim.get("fault") if x_sim else None
            fault = parse_fault(raw_fault) if raw_fault is not None else state.faults.take(self.replica, body)
            if fault is not None:
                early = await self._early_fault(request, fmt, fault, stream=body.get("stream") is True)
                if early is not None:
                    return early
            if kind == "run" and ("requests" in body or "request_id" in body):
                return self._async_queue(request, body)
            window = state.capacity.current()
            if window is not None:
                options = body.get("options")
                busy = isinstance(options, dict) and options.get("rejectIfBusy") is True
                return error_response(fmt, 429, window.message(busy), window.code)
            if kind == "chat" or (kind == "run" and "text" not in body):
                return await self._chat(request, rec, body, x_sim, fault, workers_ai, kind == "run", fmt)
            return self._embeddings(request, rec, body, fault, workers_ai, native=kind == "run")
        except ValueError as exc:  # BadRequest, or a malformed fault
            return error_response(fmt, 400, str(exc))

    async def _early_fault(
        self, request: web.Request, fmt: ErrorFormat, fault: Fault, stream: bool
    ) -> web.StreamResponse | None:
        """Faults that act before any byte is sent; None lets the request go on."""
        if fault.kind == "status":
            return error_response(fmt, fault.status, fault.message, fault.code, fault.retry_after)
        if fault.kind == "slow_first_token" and fault.delay_s > 0:
            await asyncio.sleep(fault.delay_s)
        elif fault.kind == "hang":
            await self.state.stopping.wait()
            return drop_connection(request)
        elif fault.kind == "disconnect" and not stream:
            return drop_connection(request)
        return None

    def _slot(self, request: web.Request, rec: RecordedRequest, workers_ai: bool) -> CacheSlot:
        if not workers_ai:
            return self.state.replicas[self.replica]
        index = self.state.workers_ai_index(request.headers.get("x-session-affinity"))
        rec.workers_ai_replica = index
        slot = self.state.workers_ai[index]
        slot.stats.requests += 1
        return slot

    def _account(self, slot: CacheSlot, prompt_tokens: int, cached_tokens: int) -> None:
        slot.stats.add(prompt_tokens, cached_tokens)
        replica = self.state.replicas[self.replica]
        if slot is not replica:
            replica.stats.add(prompt_tokens, cached_tokens)

    def _prompt(
        self, slot: CacheSlot, data: bytes, prompt_tokens: int, sequence: bytes | None = None
    ) -> ChatAccounting:
        """Look the prompt's blocks up in ``slot``'s cache; what the profile reports of the hits.
        ``sequence``: the conversation with the answer appended, whose blocks (the generated
        tokens' included) stay cached for the next turn."""
        block_tokens = self.state.config.block_tokens
        cached_tokens = slot.cache.lookup_and_insert(block_keys(data, block_tokens)) * block_tokens
        if sequence is not None:
            slot.cache.insert(block_keys(sequence, block_tokens))
        self._account(slot, prompt_tokens, cached_tokens)
        reported: int | None = cached_tokens
        if self.profile.cached_tokens == "never" or (
            self.profile.cached_tokens == "when_enabled" and not self.state.config.cache_report
        ):
            reported = None
        return ChatAccounting(prompt_tokens, cached_tokens, reported)

    def _rendering(self, model: str) -> Rendering:
        return self._renderings[reasoning_field(model) if self.profile.reasoning else "reasoning"]

    async def _chat(
        self,
        request: web.Request,
        rec: RecordedRequest,
        body: dict[str, Any],
        x_sim: dict[str, Any],
        fault: Fault | None,
        workers_ai: bool,
        wrap: bool,
        fmt: ErrorFormat,
    ) -> web.StreamResponse:
        state = self.state
        messages = messages_of(body)
        number = state.next_id()
        model = request.match_info.get("model", "") if wrap else ""
        if not model:
            requested = body.get("model")
            model = requested if isinstance(requested, str) else "sim-model"
        choices = state.replies.reply(body, x_sim, messages, f"call_sim{number}", self.profile)
        data, prompt_tokens = _prompt_of(body, messages)
        if self.profile.context_window is not None:
            cap = _cap(body)
            if overflow(self.profile, prompt_tokens, cap) is not None:  # refused before prefill
                return context_error(self.profile, fmt, prompt_tokens, cap)
        # The conversation as its next turn re-sends it: the first choice's message appended.
        sequence = _prompt_of(body, [*messages, message_of(choices[0], self._rendering(model))])[0]
        slot = self._slot(request, rec, workers_ai)
        return await answer_chat(
            request,
            state.config,
            rec,
            f"chatcmpl-sim{number}",
            body,
            choices,
            self._prompt(slot, data, prompt_tokens, sequence),
            model,
            fault,
            wrap,
            self._rendering(model),
            state.prefill_gates[self.replica] if self.profile.serial else None,
        )

    def _async_queue(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        """Queue a batch (``?queueRequest=true`` with ``requests``) or poll one (``request_id``)."""
        model = request.match_info["model"]
        queue = self.state.queue
        if "requests" in body:
            if request.query.get("queueRequest") != "true":
                raise BadRequest("a 'requests' batch needs ?queueRequest=true")
            if (request.content_length or 0) > async_queue.MAX_BATCH_BYTES:
                return error_response(ErrorFormat.WORKERS_AI, 413, "Request too large")
            batch = queue.enqueue(model, async_queue.validate_items(body))
            return json_response(
                envelope({"status": "queued", "request_id": batch.request_id, "model": model})
            )
        request_id = body.get("request_id")
        found = queue.get(request_id) if isinstance(request_id, str) else None
        if found is None:
            return error_response(ErrorFormat.WORKERS_AI, 404, f"no queued request {request_id!r}")
        has_capacity = self.state.capacity.current() is None
        model = found.model
        return json_response(
            envelope(queue.poll(found, has_capacity, lambda item, index: self._batch_item(item, model)))
        )

    def _batch_item(self, item: dict[str, Any], model: str) -> tuple[dict[str, Any], bool, dict[str, int]]:
        """One queued input answered as a synchronous request would be (never streamed)."""
        state = self.state
        try:
            messages = messages_of(item)
            number = state.next_id()
            choices = state.replies.reply(item, x_sim_of(item), messages, f"call_sim{number}", self.profile)
            slot = state.workers_ai[state.workers_ai_index(None)]
            slot.stats.requests += 1
            accounting = self._prompt(slot, *_prompt_of(item, messages))
        except ValueError as exc:
            return {"errors": [{"code": 3003, "message": str(exc)}]}, False, {}
        usage = usage_dict(accounting.prompt_tokens, accounting.reported_cached, choices)
        document = completion_object(
            choices, f"chatcmpl-sim{number}", int(time.time()), model, usage, self._rendering(model)
        )
        return document, True, usage

    def _embeddings(
        self,
        request: web.Request,
        rec: RecordedRequest,
        body: dict[str, Any],
        fault: Fault | None,
        workers_ai: bool,
        native: bool,
    ) -> web.Response:
        if native:
            document, tokens = native_embeddings(body)
            document = envelope(document)
        else:
            model = body.get("model")
            if not isinstance(model, str):
                raise BadRequest("'model' must be a string")
            document, tokens = openai_embeddings(body, model)
        self._account(self._slot(request, rec, workers_ai), tokens, 0)
        if fault is not None and fault.kind == "disconnect":
            return drop_connection(request)
        if fault is not None and fault.kind == "malformed_chunk":
            return web.Response(body=b"{not json", content_type="application/json")
        return json_response(document)


def _prompt_of(body: dict[str, Any], messages: list[Any]) -> tuple[bytes, int]:
    """The prompt's bytes (what the cache sees) and its tokens (images at their fixed price)."""
    counted, image_tokens = counted_messages(messages)
    data = prompt_bytes(counted, body.get("tools"))
    return data, count_bytes_tokens(data) + image_tokens


def _cap(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
