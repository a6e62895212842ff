"""A job's final result: the completion, or the OpenAI error the synchronous call would
have had (or one of the job's own: its window ended, it was cancelled, its line was bad)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.errors import GatewayError
from gateway.jobs.records import JobResult, JobState

# How an error is rendered: a door's (status, body); OpenAI's unless the job came through another
Render = Callable[[GatewayError], tuple[int, bytes]]


def openai_render(error: GatewayError) -> tuple[int, bytes]:
    return error.status, error.body_bytes()


EXPIRED = "job_expired"
CANCELLED = "job_cancelled"


class JobExpired(GatewayError):
    status = 408
    type = "invalid_request_error"
    code = EXPIRED


class JobCancelled(GatewayError):
    status = 499
    type = "invalid_request_error"
    code = CANCELLED


def succeeded(body: bytes, keep_s: float) -> JobResult:
    return JobResult(JobState.SUCCEEDED, 200, body, keep_s)


def failed(error: GatewayError, keep_s: float, render: Render = openai_render) -> JobResult:
    status, body = render(error)
    return JobResult(JobState.FAILED, status, body, keep_s, error.code)


def expired(last_cause: str | None, keep_s: float, render: Render = openai_render) -> JobResult:
    said = f" (the last attempt failed: {last_cause})" if last_cause else ""
    error = JobExpired(f"The request could not be completed before its completion window ended{said}.")
    return failed(error, keep_s, render)


def cancelled(keep_s: float, render: Render = openai_render) -> JobResult:
    error = JobCancelled("The request was cancelled before it ran.")
    status, body = render(error)
    return JobResult(JobState.CANCELLED, status, body, keep_s, error.code)
