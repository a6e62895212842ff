"""A job's final result: the completion, or the OpenAI error the synchronous call would
have had (or one of the job's own: its window ended, it was cancelled, its line was bad)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.jobs.records import JobResult, JobState

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


def succeeded(body: dict[str, Any], keep_s: float) -> JobResult:
    return JobResult(JobState.SUCCEEDED, 200, orjson.dumps(body), keep_s)


def failed(error: GatewayError, keep_s: float) -> JobResult:
    return JobResult(JobState.FAILED, error.status, error.body_bytes(), keep_s)


def expired(last_cause: str | None, keep_s: float) -> JobResult:
    said = f" (the last attempt failed: {last_cause})" if last_cause else ""
    error = JobExpired(f"The request could not be completed before its completion window ended{said}.")
    return failed(error, keep_s)


def cancelled(keep_s: float) -> JobResult:
    error = JobCancelled("The request was cancelled before it ran.")
    return JobResult(JobState.CANCELLED, error.status, error.body_bytes(), keep_s)
