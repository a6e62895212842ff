"""OpenAI's Batch API shapes: the batch object, file objects, and the output and error files.

Output and error files are not stored: they are written from the batch's job results when
asked for (`file-<batch id>-output`, `file-<batch id>-errors`), so a batch has no
"finalizing" step that a dying worker could leave half done. One line per request:

    {"id": "batch_req_...", "custom_id": "...", "response": {"status_code": 200,
     "request_id": "...", "body": {...}}, "error": null}

A request that got an HTTP answer (the completion, or the error the synchronous call would
have had) has a `response`; one that never got one (a malformed line, the window ended, the
batch was cancelled) has `response: null` and an `error` with a code and a message.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.jobs.records import BatchView, JobState, JobView, StoredFile
from gateway.jobs.results import CANCELLED, EXPIRED

OUTPUT_SUFFIX = "-output"
ERRORS_SUFFIX = "-errors"
_NO_RESPONSE = frozenset({"invalid_line", EXPIRED, CANCELLED})


def output_file_id(batch_id: str) -> str:
    return f"file-{batch_id}{OUTPUT_SUFFIX}"


def errors_file_id(batch_id: str) -> str:
    return f"file-{batch_id}{ERRORS_SUFFIX}"


def batch_of_result_file(file_id: str) -> tuple[str, bool] | None:
    """(batch id, whether it is the output file) for a result file's id; None for any other."""
    if not file_id.startswith("file-batch_"):
        return None
    for suffix, is_output in ((OUTPUT_SUFFIX, True), (ERRORS_SUFFIX, False)):
        if file_id.endswith(suffix):
            return file_id[len("file-") : -len(suffix)], is_output
    return None


def batch_object(view: BatchView, now: float) -> dict[str, Any]:
    batch = view.batch
    finished = view.done >= view.total
    cancelling = view.cancel_requested_at is not None
    if cancelling:
        status = "cancelled" if finished else "cancelling"
    else:
        status = "completed" if finished else "in_progress"
    ended_at = int(view.last_finished_at or now) if finished else None
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": None,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": status,
        "output_file_id": output_file_id(batch.id) if finished and view.succeeded else None,
        "error_file_id": errors_file_id(batch.id) if finished and view.failed else None,
        "created_at": int(batch.created_at),
        "in_progress_at": int(batch.created_at),
        "expires_at": int(batch.expires_at),
        "finalizing_at": ended_at if status == "completed" else None,
        "completed_at": ended_at if status == "completed" else None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": int(view.cancel_requested_at) if view.cancel_requested_at is not None else None,
        "cancelled_at": ended_at if status == "cancelled" else None,
        "request_counts": {"total": view.total, "completed": view.succeeded, "failed": view.failed},
        "metadata": batch.metadata,
    }


def file_object(file: StoredFile) -> dict[str, Any]:
    return {
        "id": file.id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": int(file.created_at),
        "expires_at": int(file.expires_at),
        "filename": file.filename,
        "purpose": file.purpose,
        "status": "processed",
        "status_details": None,
    }


def result_file(view: BatchView, jobs: list[JobView], output: bool) -> bytes:
    """The output file (succeeded lines) or the error file (the others), in line order."""
    lines = []
    for job in jobs:
        if output != (job.state is JobState.SUCCEEDED) or not job.state.final:
            continue
        lines.append(orjson.dumps(_line(job)))
    return b"".join(line + b"\n" for line in lines)


def result_file_object(view: BatchView, file_id: str, size: int, output: bool) -> dict[str, Any]:
    batch = view.batch
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": int(view.last_finished_at or batch.created_at),
        "expires_at": int(batch.keep_until),
        "filename": f"{batch.id}_{'output' if output else 'error'}.jsonl",
        "purpose": "batch_output",
        "status": "processed",
        "status_details": None,
    }


def _line(job: JobView) -> dict[str, Any]:
    body = orjson.loads(job.body) if job.body else {}
    code = body.get("error", {}).get("code") if isinstance(body.get("error"), dict) else None
    line: dict[str, Any] = {"id": f"batch_req_{job.id}", "custom_id": job.custom_id}
    if job.state is not JobState.SUCCEEDED and code in _NO_RESPONSE:
        line["response"] = None
        line["error"] = {"code": code, "message": body["error"].get("message")}
    else:
        line["response"] = {"status_code": job.status, "request_id": job.id, "body": body}
        line["error"] = None
    return line
