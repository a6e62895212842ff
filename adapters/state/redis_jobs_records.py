"""The Redis job store's records decoded: hashes and script replies (field/value arrays)
into the job store's records (gateway/jobs/records.py)."""

from __future__ import annotations

from gateway.jobs.records import BatchView, Claim, JobState, JobView, NewBatch, NewJob


def fields_of(raw: list[bytes]) -> dict[str, bytes]:
    return {raw[i].decode(): raw[i + 1] for i in range(0, len(raw), 2)}


def _text(fields: dict[str, bytes], name: str) -> str | None:
    value = fields.get(name)
    return value.decode() if value is not None else None


def claim_of(fields: dict[str, bytes], token: str) -> Claim:
    return Claim(
        id=fields["id"].decode(),
        tenant=fields["tenant"].decode(),
        payload=fields.get("payload", b""),
        token=token,
        attempt=int(fields["attempts"]),
        created_at=float(fields["created_at"]),
        expires_at=float(fields["expires_at"]),
        batch_id=_text(fields, "batch_id"),
        custom_id=_text(fields, "custom_id"),
    )


def new_job_of(fields: dict[str, bytes]) -> NewJob:
    return NewJob(
        id=fields["id"].decode(),
        tenant=fields["tenant"].decode(),
        payload=fields.get("payload", b""),
        created_at=float(fields["created_at"]),
        expires_at=float(fields["expires_at"]),
        batch_id=_text(fields, "batch_id"),
        line=int(fields.get("line", b"0")),
        custom_id=_text(fields, "custom_id"),
    )


def view_of(fields: dict[str, bytes]) -> JobView:
    finished = fields.get("finished_at")
    status = fields.get("status")
    return JobView(
        id=fields["id"].decode(),
        tenant=fields["tenant"].decode(),
        state=JobState(fields["state"].decode()),
        created_at=float(fields["created_at"]),
        expires_at=float(fields["expires_at"]),
        attempts=int(fields.get("attempts", b"0")),
        started=fields.get("started", b"0") == b"1",
        finished_at=float(finished) if finished is not None else None,
        status=int(status) if status is not None else None,
        body=fields.get("body"),
        batch_id=_text(fields, "batch_id"),
        custom_id=_text(fields, "custom_id"),
        line=int(fields.get("line", b"0")),
    )


def batch_view_of(fields: dict[str, bytes]) -> BatchView:
    cancel = fields.get("cancel_requested_at")
    last = fields.get("last_finished_at")
    return BatchView(
        NewBatch.from_json(fields["record"]),
        int(fields["total"]),
        int(fields["succeeded"]),
        int(fields["failed"]),
        float(cancel) if cancel is not None else None,
        float(last) if last is not None else None,
    )
