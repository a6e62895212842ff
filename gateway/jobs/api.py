"""The HTTP doors of async work: `Prefer: respond-async`, `/v1/async/{id}`, `/v1/files`,
`/v1/batches` (gateway/jobs/batches_api.py) and `/v1/webhooks`.

The HTTP edge (gateway/http.py) hands each request here as an `ApiRequest` and sends back
the `ApiAnswer`; errors are GatewayErrors, which the edge turns into OpenAI's error format.
Every id is the caller's tenant's: another tenant's id is answered as an unknown one (404).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

import orjson

from gateway.config import JobsConfig
from gateway.errors import GatewayError, InvalidRequest, MethodNotAllowed, NotFound, PayloadTooLarge
from gateway.exchange import Exchange, Principal
from gateway.jobs import batch_output, results
from gateway.jobs.api_types import ApiAnswer, ApiRequest
from gateway.jobs.batches_api import BatchesApi
from gateway.jobs.input_files import InputFiles
from gateway.jobs.multipart import parse_form
from gateway.jobs.records import JobState, JobView, StoredFile
from gateway.jobs.runner import JobRunner
from gateway.jobs.store import JobStore
from gateway.jobs.submit import Submitter, new_job_id
from gateway.jobs.webhook_destinations import WebhookDestinations
from gateway.jobs.webhooks import DELIVERY_PREFIX
from gateway.jobs.webhooks_api import WebhooksApi

if TYPE_CHECKING:
    from gateway.doors.base import Door

ASYNC_PATH = "/v1/async/"
_PREFIXES = ("/v1/files", "/v1/batches", ASYNC_PATH, "/v1/webhooks")
_MULTIPART_SLACK = 64 * 1024  # the form's own bytes around the file
_FILES_LISTED = 10_000  # GET /v1/files: the newest this many


def prefers_async(headers: Mapping[str, str]) -> bool:
    """RFC 7240: `Prefer: respond-async` (among other preferences, any case)."""
    prefer = headers.get("prefer")
    return prefer is not None and any(
        token.split("=")[0].strip().lower() == "respond-async" for token in prefer.split(",")
    )


class JobsApi:
    def __init__(
        self,
        store: JobStore,
        submitter: Submitter,
        runner: JobRunner,
        authenticate: Callable[[str | None], Principal],
        config: JobsConfig,
        input_files: InputFiles,
        webhook_destinations: WebhookDestinations,
        clock: Callable[[], float] = time.time,
        door_of_job: Callable[[str], Door | None] | None = None,
    ) -> None:
        self._store = store
        self._input_files = input_files
        self._door_of_job = door_of_job  # the door a job came through, by its id
        self._submitter = submitter
        self._runner = runner
        self._authenticate = authenticate
        self._config = config
        self._clock = clock
        self._batches = BatchesApi(store, submitter, runner, config, clock)
        self._webhooks = WebhooksApi(store, webhook_destinations, clock)

    def serves(self, path: str) -> bool:
        return path.startswith(_PREFIXES)

    async def submit(
        self,
        door: Door,
        headers: Mapping[str, str],
        raw_body: bytes,
        request_id: str,
        accept: Callable[[Exchange], Awaitable[bytes]] | None = None,
    ) -> ApiAnswer:
        """`Prefer: respond-async`: the request's governance now, 202 with the job to poll.
        `accept`: the door's own answer instead (200; a Responses `background` request), made
        once the request is governed and before the job is queued."""
        job_id = new_job_id(door.job_prefix)
        expires_at = self._clock() + self._config.completion_window_s
        job, exchange = await self._submitter.prepare(
            job_id, door.endpoint, headers, raw_body, request_id, expires_at, door=door
        )
        try:
            accepted = await accept(exchange) if accept is not None else None
            await self._store.submit([job])
        except GatewayError as exc:
            await self._submitter.abandon(exchange, exc)
            raise
        self._runner.wake()
        if accepted is not None:
            return ApiAnswer(200, accepted)
        location = ASYNC_PATH + job_id
        body = _job_document(job_id, "queued", job.created_at, job.expires_at)
        headers_out = {"location": location, "preference-applied": "respond-async", "retry-after": "1"}
        return ApiAnswer(202, orjson.dumps(body), headers_out)

    async def job(self, tenant: str, job_id: str) -> JobView | None:
        """A job of the tenant's, as it stands (None: no such job, or another tenant's)."""
        return await self._store.job(tenant, job_id)

    async def cancel(self, tenant: str, job_id: str) -> JobView | None:
        """Cancels the job if it has not started (what it reserved is released); the job as
        it then stands. A job already running finishes."""
        door = self._door_of_job(job_id) if self._door_of_job is not None else None
        render = door.error if door is not None else results.openai_render
        cancelled = await self._store.cancel_job(
            tenant, job_id, results.cancelled(self._config.results_keep_s, render)
        )
        if cancelled is not None:
            await self._runner.release(cancelled)
        return await self._store.job(tenant, job_id)

    async def handle(self, request: ApiRequest) -> ApiAnswer:
        headers = request.headers
        key = headers.get("x-api-key")  # Anthropic clients poll their jobs with their own header
        principal = self._authenticate(headers.get("authorization") or (f"Bearer {key}" if key else None))
        tenant = principal.tenant.name
        parts = request.path.rstrip("/").split("/")[2:]  # after "/v1"
        head = parts[0]
        if head == "async" and len(parts) == 2:
            return await self._async_job(request, tenant, parts[1])
        if head == "files":
            return await self._files(request, tenant, parts[1:])
        if head == "batches":
            return await self._batches.handle(request, tenant, parts[1:])
        if head == "webhooks":
            return await self._webhooks.handle(request, principal, parts[1:])
        raise NotFound(f"Unknown path {request.path}.", code="unknown_url")

    async def _async_job(self, request: ApiRequest, tenant: str, job_id: str) -> ApiAnswer:
        if request.method == "DELETE":
            view = await self.cancel(tenant, job_id)
        elif request.method not in ("GET", "HEAD"):
            raise MethodNotAllowed(f"Use GET (or DELETE, to cancel) for {request.path}.")
        else:
            view = await self._store.job(tenant, job_id)
        if view is None or view.batch_id is not None or job_id.startswith(DELIVERY_PREFIX):
            raise NotFound(f"No async job {job_id!r}.", code="job_not_found")
        if view.state.final and view.body is not None and view.status is not None:
            return ApiAnswer(view.status, view.body)
        status = "running" if view.state is JobState.RUNNING or view.started else "queued"
        document = _job_document(view.id, status, view.created_at, view.expires_at)
        return ApiAnswer(202, orjson.dumps(document), {"retry-after": "1"})

    async def _files(self, request: ApiRequest, tenant: str, rest: list[str]) -> ApiAnswer:
        if not rest:
            if request.method in ("GET", "HEAD"):
                listed = [batch_output.file_object(f) for f in await self._store.files(tenant, _FILES_LISTED)]
                return ApiAnswer(200, orjson.dumps({"object": "list", "data": listed, "has_more": False}))
            if request.method != "POST":
                raise MethodNotAllowed("Use POST or GET for /v1/files.")
            return await self._upload(request, tenant)
        file_id = rest[0]
        if request.method == "DELETE" and len(rest) == 1:
            if not await self._store.delete_file(tenant, file_id):
                raise _no_file(file_id)
            return ApiAnswer(200, orjson.dumps({"id": file_id, "object": "file", "deleted": True}))
        if request.method not in ("GET", "HEAD"):
            raise MethodNotAllowed(f"Use GET (or DELETE) for {request.path}.")
        content = len(rest) == 2 and rest[1] == "content"
        if len(rest) > 2 or (len(rest) == 2 and not content):
            raise NotFound(f"Unknown path {request.path}.", code="unknown_url")
        result_of = batch_output.batch_of_result_file(file_id)
        if result_of is not None:
            data = await self._batches.result_file(tenant, file_id, *result_of)
            if data is None:
                raise _no_file(file_id)
            document, text = data
            return (
                ApiAnswer(200, text, content_type="application/jsonl")
                if content
                else ApiAnswer(200, orjson.dumps(document))
            )
        stored = await self._store.file(tenant, file_id)
        if stored is None:
            raise _no_file(file_id)
        if not content:
            return ApiAnswer(200, orjson.dumps(batch_output.file_object(stored)))
        # As OpenAI answers: an input file goes in, never back out (what is kept is its
        # governed form, not what was uploaded).
        raise InvalidRequest(
            f"Not allowed to download files of purpose: {stored.purpose}.", code="download_not_allowed"
        )

    async def _upload(self, request: ApiRequest, tenant: str) -> ApiAnswer:
        limit = self._config.max_file_bytes
        try:
            body = await request.read_body(limit + _MULTIPART_SLACK)
        except PayloadTooLarge:
            raise _file_too_large(limit) from None
        form = parse_form(request.headers.get("content-type", ""), body)
        purpose = form.get("purpose")
        upload = form.get("file")
        if purpose is None or upload is None:
            raise InvalidRequest("Send the fields 'purpose' and 'file'.", code="missing_field")
        if purpose.content != b"batch":
            raise InvalidRequest(
                "This gateway stores files for the Batch API only: use purpose 'batch'.",
                param="purpose",
                code="unsupported_purpose",
            )
        if len(upload.content) > limit:
            raise _file_too_large(limit)
        file_id = new_job_id("file").replace("_", "-", 1)
        governed = await self._input_files.govern(
            file_id, upload.content, request.headers, self._config.max_batch_lines
        )
        now = self._clock()
        stored = StoredFile(
            file_id,
            tenant,
            "batch",
            (upload.filename or "upload.jsonl")[:255],
            len(upload.content),  # the size the client sent, as OpenAI reports it
            now,
            now + self._config.results_keep_s,
        )
        await self._store.put_file(stored, governed)
        return ApiAnswer(200, orjson.dumps(batch_output.file_object(stored)))


def _job_document(job_id: str, status: str, created_at: float, expires_at: float) -> dict[str, object]:
    return {
        "id": job_id,
        "object": "async.job",
        "status": status,
        "created_at": int(created_at),
        "expires_at": int(expires_at),
        "location": ASYNC_PATH + job_id,
    }


def _no_file(file_id: str) -> NotFound:
    return NotFound(f"No such file: {file_id!r}.", code="file_not_found")


def _file_too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The file exceeds the gateway's limit of {limit} bytes; it was not stored.", code="file_too_large"
    )
