"""Cloudflare Workers AI: the OpenAI-compatible endpoints (`/ai/v1/...`) or the native
`/ai/run/{model}` endpoint, whose `{result, success, errors}` envelope is removed here.

Workers AI reports failures as internal codes in `errors[].code`; those decide the
mapping, the HTTP status only when no code is given. The facts this relies on, and their
sources: docs/upstream-apis.md.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from adapters.upstream import errors
from adapters.upstream.http_client import HttpClient
from adapters.upstream.sse import SseChunkStream, open_event_stream
from gateway.config import WorkersAIUpstream as WorkersAIConfig
from gateway.errors import UpstreamError, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from gateway.exchange import Endpoint
from gateway.ports import Chunk, ChunkStream, Health, UpstreamRequest, UpstreamResponse
from gateway.request_ids import upstream_form

_OPENAI_PATHS = {Endpoint.CHAT: "/ai/v1/chat/completions", Endpoint.EMBEDDINGS: "/ai/v1/embeddings"}


def error_for_code(upstream: str, code: int, message: str, retry_after: float | None) -> UpstreamError | None:
    """The gateway error for a Workers AI internal code, or None for an unknown code."""
    said = f" ({code}: {message[:200]})" if message else f" ({code})"
    if code == 3040:
        return UpstreamUnavailable(
            f"Workers AI is out of capacity{said}.",
            code="upstream_overloaded",
            retry_after=retry_after,
            upstream=upstream,
        )
    if code == 3021:
        return UpstreamUnavailable(
            f"Workers AI rate limit reached{said}.",
            status=429,
            code="upstream_rate_limited",
            retry_after=retry_after,
            upstream=upstream,
        )
    if code in (3036, 4006):
        # The account's daily allocation: asking again today will not help, another upstream may.
        return UpstreamError(
            f"Workers AI daily allocation is used up{said}.",
            status=503,
            code="upstream_quota_exhausted",
            retryable=False,
            upstream=upstream,
        )
    if code == 5035:
        return UpstreamError(
            f"This Workers AI model requires the Workers Paid plan{said}.",
            code="upstream_plan_required",
            upstream=upstream,
        )
    if code in (3007, 3008, 3046):
        return UpstreamTimeout(f"Workers AI timed out{said}.", upstream=upstream)
    if code in (5007, 3042):
        return UpstreamError(
            f"Workers AI does not know the configured model{said}.",
            code="upstream_not_found",
            upstream=upstream,
        )
    if code == 3006:
        return UpstreamRejected(f"Workers AI: request too large{said}.", status=413, upstream=upstream)
    if code in (3003, 5004):
        return UpstreamRejected(f"Workers AI rejected the request{said}.", upstream=upstream)
    if code in (5016, 5018, 3023, 3041):
        return UpstreamError(
            f"Workers AI refused the gateway's account{said}.", code="upstream_forbidden", upstream=upstream
        )
    return None


class WorkersAIUpstream:
    provider = "cloudflare.workers_ai"

    def __init__(self, name: str, config: WorkersAIConfig) -> None:
        self.name = name
        self.address = urlsplit(config.base_url).netloc
        self.replicas: tuple[str, ...] = (config.base_url,)  # one endpoint; Cloudflare balances behind it
        self._account = f"{config.base_url}/accounts/{quote(config.account_id, safe='')}"
        self._native = config.api == "native"
        self._reject_if_busy = config.reject_if_busy
        self._timeouts = config.timeouts
        self._auth = f"Bearer {config.api_token}"
        self._request_id_header = config.request_id_header
        self._request_id_format = config.request_id_format
        self._client = HttpClient(
            name, max_connections=config.max_connections, connect_timeout=config.timeouts.connect_s
        )
        self._queued_models = frozenset(config.async_queue_models)

    def _url(self, request: UpstreamRequest) -> str:
        if self._native:
            return f"{self._account}/ai/run/{quote(request.model, safe='@/')}"
        return self._account + _OPENAI_PATHS[request.endpoint]

    def _payload(self, request: UpstreamRequest) -> bytes:
        body: dict[str, Any] = dict(request.body)
        if self._native:
            body.pop("model", None)
            if request.endpoint is Endpoint.EMBEDDINGS:
                text = body.pop("input")
                body = {"text": text, **{k: v for k, v in body.items() if k != "encoding_format"}}
        else:
            body["model"] = request.model
        if self._reject_if_busy:
            options = body.get("options")
            body["options"] = {**(options if isinstance(options, dict) else {}), "rejectIfBusy": True}
        return orjson.dumps(body)

    def _headers(self, request: UpstreamRequest) -> dict[str, str]:
        headers = {"authorization": self._auth, "content-type": "application/json"}
        if self._request_id_header and request.request_id:
            headers[self._request_id_header] = upstream_form(request.request_id, self._request_id_format)
        if request.session_key:
            headers["x-session-affinity"] = request.session_key
        if request.stream:
            headers["accept"] = "text/event-stream"
        if request.trace_headers:
            headers.update(request.trace_headers)
        return headers

    async def complete(self, request: UpstreamRequest) -> UpstreamResponse:
        timeout = max(request.deadline - time.monotonic(), 0.001)
        raw = await self._client.post(
            self._url(request),
            self._payload(request),
            self._headers(request),
            timeout,
            request.headers_timeout,
        )
        if raw.status != 200:
            raise self._error(raw.status, raw.body, raw.headers)
        data = errors.safe_json(raw.body)
        if not isinstance(data, dict):
            raise errors.malformed(self.name)
        if self._native:
            data = self._unwrap(data, raw.status, raw.headers, request)
        return UpstreamResponse(200, data)

    async def stream(self, request: UpstreamRequest) -> ChunkStream:
        response = await open_event_stream(
            self._client,
            self._url(request),
            self._payload(request),
            self._headers(request),
            request,
            self._timeouts.between_chunks_s,
            self._error,
        )
        if self._native:
            shape = _native_chunk_shaper(request.model)
            return _NativeChunkStream(SseChunkStream(response, self.name, shape))
        return SseChunkStream(response, self.name)

    def _unwrap(
        self, envelope: dict[str, Any], status: int, headers: dict[str, str], request: UpstreamRequest
    ) -> dict[str, Any]:
        if envelope.get("success") is False:
            raise self._error(status, orjson.dumps(envelope), headers)
        result = envelope.get("result")
        if not isinstance(result, dict):
            raise errors.malformed(self.name)
        if request.endpoint is Endpoint.EMBEDDINGS:
            return _native_embeddings(result, request.model)
        if "choices" in result:
            return result
        return _native_completion(result, request.model)

    def _error(self, status: int, body: bytes, headers: dict[str, str]) -> UpstreamError:
        retry_after = errors.retry_after_seconds(headers)
        data = errors.safe_json(body)
        found = data.get("errors") if isinstance(data, dict) else None
        if isinstance(found, list) and found and isinstance(found[0], dict):
            code, message = found[0].get("code"), found[0].get("message")
            if isinstance(code, int):
                mapped = error_for_code(
                    self.name, code, message if isinstance(message, str) else "", retry_after
                )
                if mapped is not None:
                    return mapped
            if isinstance(message, str):
                return errors.from_status(self.name, status, message[:500], retry_after)
        return errors.from_status(self.name, status, errors.openai_error_message(body), retry_after)

    def queues(self, model: str) -> bool:
        return "*" in self._queued_models or model in self._queued_models

    async def enqueue(self, request: UpstreamRequest, reference: str) -> str:
        """`POST .../ai/run/{model}?queueRequest=true` with `{"requests": [input]}`; the ack's request_id."""
        item = {**_native_input(request), "external_reference": reference}
        result = await self._queue_call(request, {"requests": [item]})
        queued_id = result.get("request_id")
        if not isinstance(queued_id, str) or not queued_id:
            raise errors.malformed(self.name)
        return queued_id

    async def poll(self, request: UpstreamRequest, queued_id: str, reference: str) -> UpstreamResponse | None:
        """`POST` the same URL with `{"request_id"}`: pending (`queued`, `running`) or the result,
        whose `responses` may come in any order (matched by `external_reference`, else `id`)."""
        result = await self._queue_call(request, {"request_id": queued_id})
        if result.get("status") in ("queued", "running"):
            return None
        responses = result.get("responses")
        if not isinstance(responses, list):
            raise errors.malformed(self.name)
        mine = next(
            (r for r in responses if isinstance(r, dict) and r.get("external_reference") == reference),
            next((r for r in responses if isinstance(r, dict) and r.get("id") == 0), None),
        )
        if mine is None:
            raise errors.malformed(self.name)
        answer = mine.get("result")
        if mine.get("success") is False or not isinstance(answer, dict):
            message = answer.get("error") if isinstance(answer, dict) else None
            raise UpstreamRejected(
                f"Workers AI's queue failed the request ({str(message or 'no reason given')[:300]}).",
                upstream=self.name,
            )
        if request.endpoint is Endpoint.EMBEDDINGS:
            return UpstreamResponse(200, _native_embeddings(answer, request.model))
        body = answer if "choices" in answer else _native_completion(answer, request.model)
        if "usage" not in body and isinstance(result.get("usage"), dict):
            body["usage"] = result["usage"]  # one request per queued batch: the batch's usage is its own
        return UpstreamResponse(200, body)

    async def _queue_call(self, request: UpstreamRequest, payload: dict[str, Any]) -> dict[str, Any]:
        url = f"{self._account}/ai/run/{quote(request.model, safe='@/')}?queueRequest=true"
        timeout = max(request.deadline - time.monotonic(), 0.001)
        headers = {"authorization": self._auth, "content-type": "application/json"}
        if request.trace_headers:
            headers.update(request.trace_headers)
        raw = await self._client.post(url, orjson.dumps(payload), headers, timeout, request.headers_timeout)
        if raw.status != 200:
            raise self._error(raw.status, raw.body, raw.headers)
        envelope = errors.safe_json(raw.body)
        if not isinstance(envelope, dict):
            raise errors.malformed(self.name)
        if envelope.get("success") is False:
            raise self._error(raw.status, raw.body, raw.headers)
        result = envelope.get("result")
        if not isinstance(result, dict):
            raise errors.malformed(self.name)
        return result

    async def check_health(self, replica: int, timeout_s: float) -> Health:
        try:
            response = await self._client.get(
                f"{self._account}/ai/models/search?per_page=1",
                {"authorization": self._auth},
                seconds=timeout_s,
            )
        except UpstreamTimeout:
            return Health.SILENT
        except UpstreamUnavailable:
            return Health.UNREACHABLE
        except UpstreamError:
            return Health.DOWN
        return Health.UP if response.status == 200 else Health.DOWN

    async def aclose(self) -> None:
        await self._client.aclose()


def _native_input(request: UpstreamRequest) -> dict[str, Any]:
    """The request as the native endpoint's input (what its queue takes, item by item)."""
    body: dict[str, Any] = {k: v for k, v in request.body.items() if k != "model"}
    if request.endpoint is Endpoint.EMBEDDINGS:
        body = {"text": body.pop("input"), **{k: v for k, v in body.items() if k != "encoding_format"}}
    return body


def _native_completion(result: dict[str, Any], model: str) -> dict[str, Any]:
    """Older models answer `{response, tool_calls: [{name, arguments}], usage}`."""
    tool_calls = [
        {
            "id": call.get("id") or f"call_{index}",
            "type": "function",
            "function": {
                "name": call.get("name"),
                "arguments": _arguments_text(call.get("arguments")),
            },
        }
        for index, call in enumerate(result.get("tool_calls") or ())
        if isinstance(call, dict)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": result.get("response")}
    if tool_calls:
        message["tool_calls"] = tool_calls
    completion: dict[str, Any] = {
        "id": f"chatcmpl-{int(time.time() * 1000)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}
        ],
    }
    if isinstance(result.get("usage"), dict):
        completion["usage"] = result["usage"]
    return completion


def _native_embeddings(result: dict[str, Any], model: str) -> dict[str, Any]:
    vectors = result.get("data") or []
    return {
        "object": "list",
        "model": model,
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
        "usage": result.get("usage") or {"prompt_tokens": 0, "total_tokens": 0},
    }


def _native_chunk_shaper(model: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """Native events (`{"response": "..."}`, flat `tool_calls`, `usage`) as OpenAI chunks;
    events already in the OpenAI shape (Kimi's) pass as they are."""
    created = int(time.time())
    chunk_id = f"chatcmpl-{created}"

    def shape(data: dict[str, Any]) -> dict[str, Any] | None:
        if "choices" in data:
            return data
        delta: dict[str, Any] = {}
        if isinstance(data.get("response"), str):
            delta["content"] = data["response"]
        calls = [c for c in data.get("tool_calls") or () if isinstance(c, dict) and c.get("name")]
        if calls:
            delta["tool_calls"] = [
                {
                    "index": index,
                    "id": call.get("id") or f"call_{index}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": _arguments_text(call.get("arguments"))},
                }
                for index, call in enumerate(calls)
            ]
        usage = data.get("usage")
        if not delta and not isinstance(usage, dict):
            return None
        chunk: dict[str, Any] = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": "tool_calls" if calls else None}]
            if delta
            else [],
        }
        if isinstance(usage, dict):
            chunk["usage"] = usage
        return chunk

    return shape


class _NativeChunkStream:
    """Native streams end with [DONE] and no finish reason; OpenAI clients expect one, so a
    final `stop` chunk is added when the upstream gave none."""

    def __init__(self, inner: SseChunkStream) -> None:
        self._inner = inner

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    def ready(self) -> int:
        return self._inner.ready()  # the closing chunk, if any, comes after the inner stream's end

    async def _chunks(self) -> AsyncIterator[Chunk]:
        finished = False
        last: dict[str, Any] = {}
        async for chunk in self._inner:
            last = chunk.data
            finished = finished or any(
                isinstance(c, dict) and c.get("finish_reason") for c in last.get("choices") or ()
            )
            yield chunk
        if not finished:
            final = {
                "id": last.get("id", "chatcmpl-native"),
                "object": "chat.completion.chunk",
                "created": last.get("created", int(time.time())),
                "model": last.get("model"),
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
            yield Chunk(orjson.dumps(final), final)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
