"""The HTTP edge: a pure ASGI application.

It turns HTTP into an Exchange and the pipeline's outcome back into HTTP, and is the
one place where an exception becomes a response: a GatewayError shows its message,
anything else is logged with the request id and shown as a generic 500. Pure ASGI (no
framework request objects, no BaseHTTPMiddleware) keeps context variables intact for
tracing and costs the least per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway import cohorts
from gateway.doors.base import Door
from gateway.doors.registry import Doors, openai_doors
from gateway.doors.responses import ResponsesDoor
from gateway.doors.routes import DoorRoutes
from gateway.errors import (
    GatewayError,
    InternalError,
    MethodNotAllowed,
    NotFound,
)
from gateway.exchange import Exchange, Principal
from gateway.http_body import ClientGone, decoded, read_body, request_timeout, wait_for_disconnect
from gateway.jobs.api import JobsApi, prefers_async
from gateway.jobs.api_types import ApiAnswer, ApiRequest
from gateway.keystore.admin import PREFIX as ADMIN_KEYS
from gateway.keystore.admin import AdminCall
from gateway.logs import flush_logs
from gateway.pipeline import Pipeline
from gateway.ports import EngineReadiness
from gateway.request_ids import UpstreamIds, request_id_from
from gateway.sessions.views import SessionViews
from gateway.tracing import CORRELATION, NO_TRACER, Correlation, Tracer

logger = logging.getLogger("tollgate.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = (b"content-type", b"application/json")
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_READINESS_TIMEOUT_S = 2.0


@dataclass(slots=True)
class Services:
    """What the edge needs, built by the composition root once the event loop runs."""

    pipeline: Pipeline
    authenticate: Callable[[str | None], Principal]
    models_for: Callable[[Principal], list[str]]
    upstream_health: Callable[[], Awaitable[dict[str, Any]]]  # /readyz's upstream section
    max_body_bytes: int
    request_timeout_s: float
    close: Callable[[], Awaitable[None]]
    # GET /admin/spend: (authorization header, query string) -> JSON; None: no admin endpoint
    admin_spend: Callable[[str | None, str], Awaitable[bytes]] | None = None
    tracer: Tracer = NO_TRACER
    # GET /metrics: (accept header) -> (page, content type); None: no metrics endpoint
    metrics: Callable[[str], Awaitable[tuple[bytes, str]]] | None = None
    # request id -> the UUID sent upstream (request_ids.py)
    upstream_ids: Callable[[str], str] = field(default_factory=UpstreamIds)
    # GET /readyz: whether the policy engine can answer (name, readiness); None: no policy
    policy_readiness: tuple[str, Callable[[], Awaitable[EngineReadiness]]] | None = None
    # the client APIs served (doors/registry.py), and their routes beside the model calls
    doors: Doors = field(default_factory=lambda: Doors(openai_doors()))
    door_routes: DoorRoutes | None = None
    # Async jobs, batches and files (gateway/jobs/api.py); None: not configured
    jobs: JobsApi | None = None
    # Called once started, with the edge itself: its synchronous calls gate the job puller
    attach_load: Callable[[Any], None] | None = None
    # GET /v1/sessions/{id} and /admin/sessions (gateway/sessions/views.py); None: sessions off
    sessions: SessionViews | None = None
    # /admin/keys[/...]: the call -> (status, JSON); None: no live keys (gateway/keystore/admin.py)
    admin_keys: Callable[[AdminCall], Awaitable[tuple[int, bytes]]] | None = None


class GatewayASGI:
    def __init__(self, build: Callable[[], Awaitable[Services]]) -> None:
        self._build = build
        self._services: Services | None = None
        self._draining = False
        self._in_flight = 0  # model calls under way
        self._idle = asyncio.Event()  # set while none is
        self._idle.set()
        self._load_listeners: list[Callable[[int], None]] = []

    def begin_draining(self) -> None:
        """The server is stopping: from now on /readyz answers 503 and a new model call is
        refused (503, `Connection: close`, so the client goes elsewhere), while the calls in
        flight, streams included, go on to their end."""
        self._draining = True

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def idle(self) -> None:
        """Return once no model call is in flight."""
        await self._idle.wait()

    def watch(self, listener: Callable[[int], None]) -> None:
        """`listener(in_flight)` at each change of the model calls in flight."""
        self._load_listeners.append(listener)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self._services = await self._build()
                    if self._services.attach_load is not None:
                        self._services.attach_load(self)
                except Exception as exc:
                    logger.exception("startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._draining = True
                if self._services is not None:
                    await self._services.close()
                flush_logs()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        request_id = request_id_from(headers.get("x-request-id"))
        path: str = scope["path"]
        services = self._services
        try:
            await self._dispatch(scope, headers, request_id, receive, send)
        except GatewayError as exc:
            await _send_error(send, exc, request_id, _error_door(services, path, headers))
        except ClientGone:
            return
        except Exception:
            logger.exception("unhandled error", extra={"request_id": request_id})
            await _send_error(
                send, InternalError(request_id), request_id, _error_door(services, path, headers)
            )

    async def _dispatch(
        self, scope: Scope, headers: dict[str, str], request_id: str, receive: Receive, send: Send
    ) -> None:
        """The route of a request: which handler answers its path."""
        path: str = scope["path"]
        method: str = scope["method"]
        services = self._services
        if services is None:
            raise GatewayError("The gateway is starting.", code="starting")
        door = services.doors.by_path.get(path)
        if door is not None:
            await self._door_call(services, door, method, headers, request_id, receive, send)
        elif path == "/v1/models" and services.door_routes is None:
            _require(method, "GET", path)
            principal = services.authenticate(headers.get("authorization"))
            await _send_json(send, 200, _models_body(services.models_for(principal)), request_id)
        elif path == "/healthz":
            _require(method, "GET", path)
            await _send_json(send, 200, b'{"status":"ok"}', request_id)
        elif path == "/readyz":
            _require(method, "GET", path)
            await self._ready(services, send, request_id)
        elif path == "/metrics" and services.metrics is not None:
            _require(method, "GET", path)
            page, content_type = await services.metrics(headers.get("accept", ""))
            await _send_page(send, page, content_type, request_id)
        elif path == "/admin/spend":
            _require(method, "GET", path)
            if services.admin_spend is None:
                raise NotFound(
                    "Spend reporting is not enabled on this gateway: /admin/spend needs an `admin:` "
                    "block (operator token hashes) and metering (a `state:` block, or any budget or "
                    "rate limit).",
                    code="admin_spend_not_configured",
                )
            query = scope.get("query_string", b"").decode("latin-1")
            body = await services.admin_spend(headers.get("authorization"), query)
            await _send_json(send, 200, body, request_id)
        elif services.jobs is not None and services.jobs.serves(path):
            await _send_answer(
                send,
                await services.jobs.handle(_api_request(scope, headers, request_id, receive)),
                request_id,
            )
        elif path.startswith("/v1/sessions/") or path == "/admin/sessions":
            _require(method, "GET", path)
            await _send_json(send, 200, await _sessions(services, path, headers, scope), request_id)
        elif path == ADMIN_KEYS or path.startswith(ADMIN_KEYS + "/"):
            await _admin_keys(services, scope, headers, request_id, receive, send)
        else:  # a door's other routes (stored responses, count_tokens, a model), or nothing
            await _door_route(services, scope, headers, request_id, receive, send)

    async def _door_call(
        self,
        services: Services,
        door: Door,
        method: str,
        headers: dict[str, str],
        request_id: str,
        receive: Receive,
        send: Send,
    ) -> None:
        """A model call through a door: now, or, asked for, as an async job (gateway/jobs/)."""
        path = door.path
        if method != "POST":
            raise MethodNotAllowed(f"Use POST for {path}.")
        if self._draining:
            raise _shutting_down()
        jobs = services.jobs
        if jobs is not None and prefers_async(headers):  # queued now, answered later (gateway/jobs/)
            limit = services.max_body_bytes
            body = decoded(await read_body(receive, headers, limit), headers, limit)
            await _send_answer(send, await jobs.submit(door, headers, body, request_id), request_id)
        elif jobs is not None and isinstance(door, ResponsesDoor):  # its own async form: `background`
            limit = services.max_body_bytes
            body = decoded(await read_body(receive, headers, limit), headers, limit)
            if door.background(body):
                answer = await jobs.submit(door, headers, body, request_id, door.accepted)
                await _send_answer(send, answer, request_id)
            else:
                await self._counted(
                    self._model_call(services, door, headers, request_id, receive, send, body)
                )
        else:
            await self._counted(self._model_call(services, door, headers, request_id, receive, send))

    async def _counted(self, call: Awaitable[None]) -> None:
        self._in_flight += 1
        cohorts.entered()
        self._idle.clear()
        for listener in self._load_listeners:
            listener(self._in_flight)
        try:
            await call
        finally:
            self._in_flight -= 1
            cohorts.left()
            if not self._in_flight:
                self._idle.set()
            for listener in self._load_listeners:
                listener(self._in_flight)

    async def _ready(self, services: Services, send: Send, request_id: str) -> None:
        if self._draining:
            await _send_json(send, 503, b'{"status":"draining"}', request_id)
            return
        health, policy = await asyncio.gather(services.upstream_health(), _policy_readiness(services))
        body: dict[str, Any] = {"status": "ready"}
        if policy is not None:
            body["policy"] = policy
            if not policy["ready"]:
                body["status"] = "not_ready"  # every request would be refused: take no traffic
        body.update(health)  # upstreams, and each replica's health, circuit and load
        await _send_json(send, 200 if body["status"] == "ready" else 503, orjson.dumps(body), request_id)

    async def _model_call(
        self,
        services: Services,
        door: Door,
        headers: dict[str, str],
        request_id: str,
        receive: Receive,
        send: Send,
        raw_body: bytes | None = None,  # already read (and decoded)
    ) -> None:
        now = time.monotonic()
        exchange = Exchange(
            request_id=request_id,
            endpoint=door.endpoint,
            received_at=now,
            deadline=now + services.request_timeout_s,
            headers=headers,
            raw_body=b"",
            upstream_request_id=services.upstream_ids(request_id),
            door=door,
        )
        pipeline = services.pipeline
        exchange.trace = trace = services.tracer.begin(exchange)
        correlation = CORRELATION.set(Correlation(request_id, trace))
        failure: BaseException | None = None
        try:
            if "x-request-timeout" in headers:
                exchange.deadline = now + request_timeout(
                    headers["x-request-timeout"], services.request_timeout_s
                )
            exchange.raw_body = (
                raw_body
                if raw_body is not None
                else decoded(
                    await read_body(receive, headers, services.max_body_bytes),
                    headers,
                    services.max_body_bytes,
                )
            )
            await pipeline.prepare(exchange)
            if exchange.replay_body is not None:  # an Idempotency-Key's stored response
                exchange.status = 200
                await _send_json(send, 200, exchange.replay_body, request_id, exchange.response_headers)
            elif exchange.stream:
                await self._stream(pipeline, exchange, door, receive, send)
            else:
                body = await pipeline.respond(exchange)
                exchange.status = 200
                exchange.first_byte_at = time.monotonic()
                exchange.response_body = await door.response(exchange, body)
                await _send_json(send, 200, exchange.response_body, request_id, exchange.response_headers)
        except GatewayError as exc:
            exchange.status = exc.status
            exchange.error_code = exc.code
            for name, value in exchange.response_headers.items():  # e.g. x-ratelimit-*, on errors too
                exc.headers.setdefault(name, value)
            failure = exc
        except ClientGone as gone:
            exchange.error_code = "client_disconnected"
            failure = gone
        except Exception as error:
            exchange.status = 500
            exchange.error_code = "internal_error"
            failure = error
        except BaseException as cancelled:
            failure = cancelled
        # Not a `finally`: compiled, an await there can lose the exception passing through it
        # (docs/architecture.md, Compiled request path).
        await pipeline.finish(exchange)
        trace.end(exchange)
        CORRELATION.reset(correlation)
        if failure is not None:
            raise failure

    async def _stream(
        self, pipeline: Pipeline, exchange: Exchange, door: Door, receive: Receive, send: Send
    ) -> None:
        opened = await pipeline.open_stream(exchange)
        exchange.status = 200
        headers = [*_SSE_HEADERS, (b"x-request-id", exchange.request_id.encode())]
        headers.extend((k.encode(), v.encode()) for k, v in exchange.response_headers.items())

        encoder = door.stream(exchange)

        async def relay() -> None:
            started = False
            try:
                async for event in pipeline.relay(exchange, opened, encoder):
                    if not started:
                        await send({"type": "http.response.start", "status": 200, "headers": headers})
                        exchange.first_byte_at = time.monotonic()
                        started = True
                    await send({"type": "http.response.body", "body": event, "more_body": True})
            except Exception as exc:
                if not started:
                    raise exc
                # Headers are out: the only honest signal left is an error event and the end.
                logger.exception("stream failed", extra={"request_id": exchange.request_id})
                exchange.status, exchange.error_code = 500, "internal_error"
                error = encoder.error(InternalError(exchange.request_id))
                await send({"type": "http.response.body", "body": error, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        relay_task = asyncio.ensure_future(relay())
        watcher = asyncio.ensure_future(wait_for_disconnect(receive))
        cancelled: BaseException | None = None
        try:
            await asyncio.wait((relay_task, watcher), return_when=asyncio.FIRST_COMPLETED)
        except BaseException as stopped:  # this task cancelled (an await in a `finally` would lose it)
            cancelled = stopped
        if not relay_task.done():
            # The client went away (or this task was cancelled): stop relaying, which
            # closes the upstream stream in the relay's own finally.
            relay_task.cancel()
            exchange.error_code = exchange.error_code or "client_disconnected"
            with contextlib.suppress(asyncio.CancelledError):
                await relay_task
        watcher.cancel()
        if cancelled is not None:
            raise cancelled
        if not relay_task.cancelled():
            relay_task.result()


async def _sessions(services: Services, path: str, headers: dict[str, str], scope: Scope) -> bytes:
    views = services.sessions
    if views is None:
        raise NotFound(
            "Sessions are off on this gateway (sessions.enabled: false).", code="sessions_disabled"
        )
    if path == "/admin/sessions":
        return await views.listing(
            headers.get("authorization"), scope.get("query_string", b"").decode("latin-1")
        )
    return await views.one(headers.get("authorization"), path.removeprefix("/v1/sessions/"))


def _error_door(services: Services | None, path: str, headers: dict[str, str]) -> Door | None:
    """The door whose envelope an error on `path` takes (None: OpenAI's)."""
    return services.doors.for_errors(path, headers) if services is not None else None


async def _door_route(
    services: Services, scope: Scope, headers: dict[str, str], request_id: str, receive: Receive, send: Send
) -> None:
    """A door's route beside its model calls (stored responses, count_tokens, a model)."""
    path: str = scope["path"]
    if services.door_routes is None or not services.door_routes.serves(path):
        raise NotFound(f"Unknown path {path}.", code="unknown_url")
    limit = services.max_body_bytes
    body = await services.door_routes.handle(
        scope["method"],
        scope["path"],
        headers,
        lambda: read_body(receive, headers, limit),
        scope.get("query_string", b"").decode("latin-1"),
    )
    await _send_json(send, 200, body, request_id)


async def _admin_keys(
    services: Services,
    scope: Scope,
    headers: dict[str, str],
    request_id: str,
    receive: Receive,
    send: Send,
) -> None:
    if services.admin_keys is None:
        raise NotFound(
            "Live keys are not enabled on this gateway: /admin/keys needs an `admin:` block (operator "
            "token hashes) and a `live_keys:` block.",
            code="admin_keys_not_configured",
        )
    method: str = scope["method"]
    body = await read_body(receive, headers, services.max_body_bytes) if method == "POST" else b""
    call = AdminCall(
        method,
        scope["path"],
        scope.get("query_string", b"").decode("latin-1"),
        headers.get("authorization"),
        body,
        request_id,
    )
    status, payload = await services.admin_keys(call)
    await _send_json(send, status, payload, request_id)


def _shutting_down() -> GatewayError:
    error = GatewayError(
        "The gateway is shutting down; retry the request.",
        code="shutting_down",
        headers={"connection": "close", "retry-after": "1"},
    )
    error.status = 503
    return error


async def _policy_readiness(services: Services) -> dict[str, Any] | None:
    if services.policy_readiness is None:
        return None
    engine, readiness = services.policy_readiness
    try:
        async with asyncio.timeout(_READINESS_TIMEOUT_S):
            answer = await readiness()
    except TimeoutError:
        answer = EngineReadiness(False, "the policy engine did not say whether it is ready in time")
    return {"engine": engine, "ready": answer.ready, "detail": answer.detail}


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}


def _require(method: str, expected: str, path: str) -> None:
    if method != expected and not (expected == "GET" and method == "HEAD"):
        raise MethodNotAllowed(f"Use {expected} for {path}.")


def _models_body(aliases: list[str]) -> bytes:
    data = [{"id": alias, "object": "model", "created": 0, "owned_by": "tollgate"} for alias in aliases]
    return orjson.dumps({"object": "list", "data": data})


async def _send_json(
    send: Send,
    status: int,
    body: bytes,
    request_id: str,
    extra: dict[str, str] | None = None,
) -> None:
    headers = [_JSON, (b"content-length", str(len(body)).encode()), (b"x-request-id", request_id.encode())]
    if extra:
        headers.extend((k.encode(), v.encode()) for k, v in extra.items())
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_page(send: Send, page: bytes, content_type: str, request_id: str) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(page)).encode()),
        (b"x-request-id", request_id.encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": page})


def _api_request(scope: Scope, headers: dict[str, str], request_id: str, receive: Receive) -> ApiRequest:
    async def body(limit: int) -> bytes:
        return decoded(await read_body(receive, headers, limit), headers, limit)

    query = scope.get("query_string", b"").decode("latin-1")
    return ApiRequest(scope["method"], scope["path"], query, headers, request_id, body)


async def _send_answer(send: Send, answer: ApiAnswer, request_id: str) -> None:
    if answer.content_type == "application/json":
        await _send_json(send, answer.status, answer.body, request_id, answer.headers)
        return
    headers = [
        (b"content-type", answer.content_type.encode()),
        (b"content-length", str(len(answer.body)).encode()),
        (b"x-request-id", request_id.encode()),
        *((k.encode(), v.encode()) for k, v in answer.headers.items()),
    ]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def _send_error(send: Send, exc: GatewayError, request_id: str, door: Door | None = None) -> None:
    status, body = door.error(exc) if door is not None else (exc.status, exc.body_bytes())
    await _send_json(send, status, body, request_id, exc.headers)
