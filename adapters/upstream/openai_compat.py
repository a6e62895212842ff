"""Any OpenAI-compatible server: vLLM, SGLang, llama.cpp's llama-server, the simulator.

One upstream may be a pool of such servers (`replicas` in its config): the forwarder
chooses the replica of each attempt and names it in `UpstreamRequest.replica`; this
adapter only sends there, over one keep-alive connection pool shared by all replicas.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import orjson

from adapters.upstream import errors
from adapters.upstream.http_client import HttpClient
from adapters.upstream.sse import SseChunkStream, open_event_stream
from gateway.config import OpenAICompatUpstream as OpenAICompatConfig
from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from gateway.exchange import Endpoint
from gateway.ports import ChunkStream, Health, UpstreamRequest, UpstreamResponse
from gateway.request_ids import upstream_form

_PATHS = {Endpoint.CHAT: "/chat/completions", Endpoint.EMBEDDINGS: "/embeddings"}


class OpenAICompatUpstream:
    def __init__(self, name: str, config: OpenAICompatConfig) -> None:
        self.name = name
        self.provider = config.provider
        self.address = urlsplit(config.base_url).netloc
        self.replicas = tuple(config.replicas or [config.base_url])
        # Per replica: the endpoint URLs, and the health check (relative to the server root).
        self._urls = [{endpoint: base + path for endpoint, path in _PATHS.items()} for base in self.replicas]
        self._health_urls = [_root(base) + config.health_path for base in self.replicas]
        self._timeouts = config.timeouts
        self._auth = f"Bearer {config.api_key}" if config.api_key else None
        self._request_id_header = config.request_id_header
        self._request_id_format = config.request_id_format
        self._client = HttpClient(
            name,
            max_connections=config.max_connections * len(self.replicas),
            connect_timeout=config.timeouts.connect_s,
        )

    def _headers(self, request: UpstreamRequest) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self._request_id_header and request.request_id:
            headers[self._request_id_header] = upstream_form(request.request_id, self._request_id_format)
        if self._auth:
            headers["authorization"] = self._auth
        if request.session_key:
            headers["x-session-affinity"] = request.session_key
        if request.stream:
            headers["accept"] = "text/event-stream"
        if request.trace_headers:
            headers.update(request.trace_headers)
        return headers

    def _payload(self, request: UpstreamRequest) -> bytes:
        body: dict[str, Any] = {**request.body, "model": request.model}
        return orjson.dumps(body)

    async def complete(self, request: UpstreamRequest) -> UpstreamResponse:
        timeout = max(request.deadline - time.monotonic(), 0.001)
        raw = await self._client.post(
            self._urls[request.replica][request.endpoint],
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
        return UpstreamResponse(200, data)

    async def stream(self, request: UpstreamRequest) -> ChunkStream:
        response = await open_event_stream(
            self._client,
            self._urls[request.replica][request.endpoint],
            self._payload(request),
            self._headers(request),
            request,
            self._timeouts.between_chunks_s,
            self._error,
        )
        return SseChunkStream(response, self.name)

    def _error(self, status: int, body: bytes, headers: dict[str, str]) -> UpstreamError:
        return errors.from_status(
            self.name, status, errors.openai_error_message(body), errors.retry_after_seconds(headers)
        )

    async def check_health(self, replica: int, timeout_s: float) -> Health:
        try:
            response = await self._client.get(self._health_urls[replica], {}, seconds=timeout_s)
        except UpstreamTimeout:
            return Health.SILENT
        except UpstreamUnavailable:
            return Health.UNREACHABLE
        except UpstreamError:
            return Health.DOWN
        return Health.UP if response.status == 200 else Health.DOWN

    async def aclose(self) -> None:
        await self._client.aclose()


def _root(base_url: str) -> str:
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"
