"""Background responses (`background: true`): a Response answered at once as `queued`, run
as an async job (gateway/jobs/), polled with `GET /v1/responses/{id}` and cancelled with
`POST /v1/responses/{id}/cancel`.

The Response's id is its job's. At submission the door stores the `queued` Response
(`ResponsesDoor.accepted`); the job's worker stores the finished one, as any stored response,
before the job ends. Until then a read merges the stored Response with its job's state:
`in_progress` once a worker has begun, `failed` (with the error the synchronous call would
have had) or `cancelled` when it ended so; those ends are written back to the record, which
outlives the job's result.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from gateway.doors.response_store import ResponseRecords, StoredResponse
from gateway.doors.responses import BUSY, not_found
from gateway.errors import InvalidRequest
from gateway.exchange import Principal
from gateway.jobs.records import JobState, JobView


class BackgroundJobs(Protocol):
    """What background responses need of the async jobs (gateway/jobs/api.py's JobsApi)."""

    async def job(self, tenant: str, job_id: str) -> JobView | None: ...

    async def cancel(self, tenant: str, job_id: str) -> JobView | None: ...


class BackgroundResponses:
    def __init__(self, records: ResponseRecords, jobs: BackgroundJobs | None) -> None:
        self._records = records
        self._jobs = jobs  # None: no async jobs, so no response is a background one

    async def retrieve(self, principal: Principal, response_id: str) -> dict[str, Any]:
        stored = await self._records.load(principal, response_id)
        if stored is None:
            raise not_found(response_id)
        if stored.response.get("status") not in BUSY or self._jobs is None:
            return stored.response
        view = await self._jobs.job(principal.tenant.name, response_id)
        return await self._merged(principal, stored, view)

    async def cancel(self, principal: Principal, response_id: str) -> dict[str, Any]:
        stored = await self._records.load(principal, response_id)
        if stored is None:
            raise not_found(response_id)
        if stored.response.get("background") is not True:
            raise InvalidRequest(
                "Only a background response can be cancelled.", param="response_id", code="not_background"
            )
        if stored.response.get("status") not in BUSY or self._jobs is None:
            return stored.response  # already ended: cancelling changes nothing
        view = await self._jobs.cancel(principal.tenant.name, response_id)
        return await self._merged(principal, stored, view)

    async def delete(self, principal: Principal, response_id: str) -> bool:
        """Deletes the record; a background response not started yet is cancelled first (one
        already running finishes, and stores what it answered)."""
        stored = await self._records.load(principal, response_id)
        if stored is None:
            return False
        if stored.response.get("status") in BUSY and self._jobs is not None:
            await self._jobs.cancel(principal.tenant.name, response_id)
        return await self._records.delete(principal, response_id)

    async def _merged(
        self, principal: Principal, stored: StoredResponse, view: JobView | None
    ) -> dict[str, Any]:
        response = dict(stored.response)
        if view is not None and not view.state.final:
            response["status"] = "in_progress" if view.state is JobState.RUNNING or view.started else "queued"
            return response
        if view is not None and view.state is JobState.SUCCEEDED:
            # The worker stored the finished Response before ending the job: read it again
            again = await self._records.load(principal, stored.response["id"])
            if again is not None and again.response.get("status") not in BUSY:
                return again.response
            if view.body is not None:  # it could not store it: the job's result is the Response
                finished: dict[str, Any] = orjson.loads(view.body)
                return finished
        if view is not None and view.state is JobState.CANCELLED:
            response["status"] = "cancelled"
        else:  # failed, or its result is gone (kept for less time than the record)
            response["status"] = "failed"
            response["error"] = _error(view)
        await self._records.save(principal, response["id"], StoredResponse(response, [], stored.input))
        return response


def _error(view: JobView | None) -> dict[str, Any]:
    """The Response's `error` for a job that failed: its OpenAI error's code and message."""
    if view is not None and view.body is not None:
        error = orjson.loads(view.body).get("error")
        if isinstance(error, dict):
            return {"code": error.get("code") or "server_error", "message": error.get("message") or ""}
    return {"code": "response_lost", "message": "The response's result is no longer available."}
