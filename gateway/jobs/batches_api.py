"""`/v1/batches`: OpenAI's Batch API over the job queue.

Creating a batch runs each line of its input file through the request-side stages (the
same governance as a synchronous call: policy, redaction, budget), then stores the batch
with a job per line, all at once. A line refused there (malformed, denied, over budget)
fails alone, in the error file; the batch goes on. Cancelling cancels the lines not started
and releases what they reserved; lines already running finish.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

import orjson

from gateway.config import JobsConfig
from gateway.errors import GatewayError, InvalidRequest, MethodNotAllowed, NotFound
from gateway.exchange import Exchange
from gateway.jobs import batch_input, batch_output, results
from gateway.jobs.api_types import ApiAnswer, ApiRequest
from gateway.jobs.batch_input import ENDPOINTS
from gateway.jobs.records import BatchView, JobResult, NewBatch, NewJob
from gateway.jobs.runner import JobRunner
from gateway.jobs.store import JobStore
from gateway.jobs.submit import Submitter, new_job_id
from gateway.validation import parse_json_object

WINDOWS = {"24h": 86_400.0}
_PREPARE_AT_ONCE = 16  # lines going through the request stages together
_MAX_METADATA = 16


class BatchesApi:
    def __init__(
        self,
        store: JobStore,
        submitter: Submitter,
        runner: JobRunner,
        config: JobsConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._submitter = submitter
        self._runner = runner
        self._config = config
        self._clock = clock

    async def handle(self, request: ApiRequest, tenant: str, rest: list[str]) -> ApiAnswer:
        method = request.method
        if not rest:
            if method == "POST":
                body = parse_json_object(await request.read_body(64 * 1024))
                return _json(await self._create(body, tenant, request))
            if method in ("GET", "HEAD"):
                return _json(await self._list(tenant, request.query))
            raise MethodNotAllowed("Use POST or GET for /v1/batches.")
        batch_id = rest[0]
        if len(rest) == 1 and method in ("GET", "HEAD"):
            return _json(batch_output.batch_object(await self._view(tenant, batch_id), self._clock()))
        if len(rest) == 2 and rest[1] == "cancel":
            if method != "POST":
                raise MethodNotAllowed("Use POST to cancel a batch.")
            return _json(await self._cancel(tenant, batch_id))
        raise NotFound(f"Unknown path {request.path}.", code="unknown_url")

    async def result_file(
        self, tenant: str, file_id: str, batch_id: str, output: bool
    ) -> tuple[dict[str, Any], bytes] | None:
        view = await self._store.batch(tenant, batch_id)
        if view is None or view.done < view.total or not (view.succeeded if output else view.failed):
            return None
        text = batch_output.result_file(view, await self._store.batch_jobs(tenant, batch_id), output)
        return batch_output.result_file_object(view, file_id, len(text), output), text

    async def _view(self, tenant: str, batch_id: str) -> BatchView:
        view = await self._store.batch(tenant, batch_id)
        if view is None:
            raise NotFound(f"No such batch: {batch_id!r}.", code="batch_not_found")
        return view

    async def _create(self, body: dict[str, Any], tenant: str, request: ApiRequest) -> dict[str, Any]:
        input_file_id, endpoint_path, window_name, metadata = _creation_fields(body)
        file = await self._store.file(tenant, input_file_id)
        if file is None:
            raise NotFound(f"No such file: {input_file_id!r}.", param="input_file_id", code="file_not_found")
        if file.purpose != "batch":
            raise InvalidRequest("The input file's purpose must be 'batch'.", param="input_file_id")
        content = await self._store.file_content(tenant, input_file_id) or b""
        lines = batch_input.read_lines(content, endpoint_path, self._config.max_batch_lines)
        now = self._clock()
        window_s = min(WINDOWS[window_name], self._config.completion_window_s)
        keep_s = self._config.results_keep_s
        batch = NewBatch(
            new_job_id("batch"),
            tenant,
            endpoint_path,
            input_file_id,
            window_name,
            now,
            now + window_s,
            now + window_s + keep_s,
            metadata,
        )
        queued, refused, exchanges = await self._prepare_lines(
            batch, lines, request.headers, request.request_id, keep_s + window_s
        )
        try:
            await self._store.create_batch(batch, queued, refused)
        except GatewayError as exc:
            await asyncio.gather(*(self._submitter.abandon(exchange, exc) for exchange in exchanges))
            raise
        self._runner.wake()
        view = await self._view(tenant, batch.id)
        return batch_output.batch_object(view, self._clock())

    async def _prepare_lines(
        self,
        batch: NewBatch,
        lines: list[batch_input.BatchLine],
        headers: Mapping[str, str],
        request_id: str,
        keep_s: float,
    ) -> tuple[list[NewJob], list[tuple[NewJob, JobResult]], list[Exchange]]:
        endpoint = ENDPOINTS[batch.endpoint]
        queued: list[NewJob] = []
        refused: list[tuple[NewJob, JobResult]] = []
        exchanges: list[Exchange] = []
        gate = asyncio.Semaphore(_PREPARE_AT_ONCE)

        async def one(line: batch_input.BatchLine) -> None:
            job_id = new_job_id()
            placeholder = NewJob(
                job_id,
                batch.tenant,
                b"",
                batch.created_at,
                batch.expires_at,
                batch.id,
                line.line,
                line.custom_id,
            )
            if line.error is not None:
                refused.append((placeholder, results.failed(line.error, keep_s)))
                return
            async with gate:
                try:
                    job, exchange = await self._submitter.prepare(
                        job_id,
                        endpoint,
                        headers,
                        line.body,
                        request_id,
                        batch.expires_at,
                        batch.id,
                        line.line,
                        line.custom_id,
                    )
                except GatewayError as exc:
                    refused.append((placeholder, results.failed(exc, keep_s)))
                    return
            queued.append(job)
            exchanges.append(exchange)

        await asyncio.gather(*(one(line) for line in lines))
        return queued, refused, exchanges

    async def _list(self, tenant: str, query: str) -> dict[str, Any]:
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        try:
            limit = int(params.get("limit", "20"))
        except ValueError:
            limit = -1
        if not 1 <= limit <= 100:
            raise InvalidRequest("'limit' must be an integer from 1 to 100.", param="limit")
        views = await self._store.batches(tenant, params.get("after"), limit + 1)
        now = self._clock()
        data = [batch_output.batch_object(view, now) for view in views[:limit]]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(views) > limit,
        }

    async def _cancel(self, tenant: str, batch_id: str) -> dict[str, Any]:
        cancelled = await self._store.cancel_batch(
            tenant, batch_id, results.cancelled(self._config.results_keep_s)
        )
        if cancelled is None:
            raise NotFound(f"No such batch: {batch_id!r}.", code="batch_not_found")
        self._runner.batch_cancelled(batch_id)
        for job in cancelled:
            await self._runner.release(job)
        return batch_output.batch_object(await self._view(tenant, batch_id), self._clock())


def _creation_fields(body: dict[str, Any]) -> tuple[str, str, str, dict[str, str] | None]:
    input_file_id = body.get("input_file_id")
    if not isinstance(input_file_id, str) or not input_file_id:
        raise InvalidRequest("'input_file_id' must be a file id.", param="input_file_id")
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise InvalidRequest(
            f"'endpoint' must be one of {', '.join(ENDPOINTS)}.",
            param="endpoint",
            code="unsupported_endpoint",
        )
    window = body.get("completion_window")
    if window not in WINDOWS:
        raise InvalidRequest("'completion_window' must be \"24h\".", param="completion_window")
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > _MAX_METADATA
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in metadata.items()
        )
    ):
        raise InvalidRequest(
            f"'metadata' must be an object of at most {_MAX_METADATA} strings"
            " (keys up to 64 characters, values up to 512).",
            param="metadata",
        )
    return input_file_id, endpoint, window, metadata


def _json(document: dict[str, Any]) -> ApiAnswer:
    return ApiAnswer(200, orjson.dumps(document))
