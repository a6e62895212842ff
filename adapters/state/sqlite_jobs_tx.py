"""The SQLite job store's operations (`sqlite_jobs.py` runs each inside a write transaction).

They take the connection and the current time (unix seconds) first, and implement the
semantics of the `JobStore` port (gateway/jobs/store.py) that the Redis scripts in
`redis_jobs_scripts.py` implement too; one contract test module runs against both.
"""

from __future__ import annotations

import sqlite3
import uuid
from operator import itemgetter
from typing import Any

import orjson

from gateway.jobs.records import (
    BatchView,
    Claim,
    JobResult,
    JobState,
    JobView,
    NewBatch,
    NewJob,
    QueueDepth,
    StoredFile,
    Webhook,
)

_JOB_COLUMNS = (
    "id, tenant, state, created_at, expires_at, attempts, started, finished_at, status, body, batch_id,"
    " custom_id, line"
)
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, batch_id TEXT, line INTEGER NOT NULL DEFAULT 0,
    custom_id TEXT, state TEXT NOT NULL, payload BLOB, token TEXT,
    attempts INTEGER NOT NULL DEFAULT 0, started INTEGER NOT NULL DEFAULT 0,
    visible_at REAL NOT NULL, lease_until REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, expires_at REAL NOT NULL,
    finished_at REAL, status INTEGER, body BLOB, keep_until REAL,
    causes TEXT NOT NULL DEFAULT '{}'
);
DROP INDEX IF EXISTS jobs_ready;
DROP INDEX IF EXISTS jobs_lapsed;
DROP INDEX IF EXISTS jobs_keep;
CREATE INDEX IF NOT EXISTS jobs_queued ON jobs (visible_at) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS jobs_running ON jobs (lease_until) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs (batch_id, line);
CREATE INDEX IF NOT EXISTS jobs_kept ON jobs (keep_until) WHERE keep_until IS NOT NULL;
CREATE TABLE IF NOT EXISTS job_files (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, purpose TEXT NOT NULL, filename TEXT NOT NULL,
    bytes INTEGER NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL, content BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS job_batches (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, record BLOB NOT NULL, created_at REAL NOT NULL,
    total INTEGER NOT NULL, succeeded INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
    cancel_requested_at REAL, last_finished_at REAL, keep_until REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS job_batches_tenant ON job_batches (tenant, created_at);
CREATE TABLE IF NOT EXISTS job_webhooks (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, url TEXT NOT NULL, secret TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS job_webhooks_tenant ON job_webhooks (tenant, created_at);
"""


def insert_jobs(db: sqlite3.Connection, now: float, jobs: list[NewJob]) -> None:
    db.executemany(
        "INSERT OR IGNORE INTO jobs (id, tenant, batch_id, line, custom_id, state, payload, visible_at,"
        " created_at, expires_at) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
        [
            (j.id, j.tenant, j.batch_id, j.line, j.custom_id, j.payload, now, j.created_at, j.expires_at)
            for j in jobs
        ],
    )


def claim(db: sqlite3.Connection, now: float, worker: str, limit: int, visibility_s: float) -> list[Claim]:
    """Up to `limit` queued jobs, the longest visible first, then jobs whose claim lapsed; each
    kind taken by one UPDATE, its token this claim's followed by the job's id."""
    token = f"{worker}:{uuid.uuid4().hex}:"
    lease_until = now + visibility_s
    rows = db.execute(_CLAIM_QUEUED, (token, lease_until, now, limit)).fetchall()
    rows.sort(key=_VISIBLE_ORDER)
    if len(rows) < limit:
        lapsed = db.execute(_CLAIM_LAPSED, (token, lease_until, now, limit - len(rows))).fetchall()
        lapsed.sort(key=_ROWID)
        rows += lapsed
    return [Claim(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows]


# RETURNING gives rows in no set order: each comes back with its rowid and visible_at (which a
# claim leaves alone) so that the claims keep the order the SELECT chose them in.
_CLAIM_SET = (
    "UPDATE jobs SET state = 'running', token = ?1 || id, attempts = attempts + 1, started = 1,"
    " lease_until = ?2 WHERE rowid IN ({chosen}) RETURNING id, tenant, payload, token, attempts, created_at,"
    " expires_at, batch_id, custom_id, visible_at, rowid"
)
_CLAIM_QUEUED = _CLAIM_SET.format(
    chosen="SELECT rowid FROM jobs WHERE state = 'queued' AND visible_at <= ?3 ORDER BY visible_at LIMIT ?4"
)
_CLAIM_LAPSED = _CLAIM_SET.format(
    chosen="SELECT rowid FROM jobs WHERE state = 'running' AND lease_until <= ?3"
    " ORDER BY lease_until LIMIT ?4"
)
_VISIBLE_ORDER = itemgetter(9, 10)  # visible_at, rowid
_ROWID = itemgetter(10)


def extend(db: sqlite3.Connection, now: float, claim: Claim, visibility_s: float) -> bool:
    cursor = db.execute(
        "UPDATE jobs SET lease_until = ? WHERE id = ? AND token = ? AND state = 'running'",
        (now + visibility_s, claim.id, claim.token),
    )
    return cursor.rowcount == 1


def retry_later(
    db: sqlite3.Connection, now: float, claim: Claim, delay_s: float, cause: str, payload: bytes | None
) -> bool:
    row = db.execute(
        "SELECT causes FROM jobs WHERE id = ? AND token = ? AND state = 'running'", (claim.id, claim.token)
    ).fetchone()
    if row is None:
        return False
    causes = orjson.loads(row[0])
    causes[cause] = causes.get(cause, 0) + 1
    db.execute(
        "UPDATE jobs SET state = 'queued', token = NULL, visible_at = ?, causes = ?,"
        " payload = COALESCE(?, payload) WHERE id = ?",
        (now + delay_s, orjson.dumps(causes).decode(), payload, claim.id),
    )
    return True


def finish(db: sqlite3.Connection, now: float, claim: Claim, result: JobResult) -> bool:
    row = db.execute(
        "UPDATE jobs SET state = ?, status = ?, body = ?, finished_at = ?, keep_until = ?, payload = NULL,"
        " token = NULL WHERE id = ? AND token = ? AND state = 'running' RETURNING batch_id",
        (result.state.value, result.status, result.body, now, now + result.keep_s, claim.id, claim.token),
    ).fetchone()
    if row is None:
        return False
    if row[0] is not None:
        _count_in_batch(db, now, row[0], result.state)
    return True


def _count_in_batch(db: sqlite3.Connection, now: float, batch_id: str, state: JobState) -> None:
    succeeded = 1 if state is JobState.SUCCEEDED else 0
    db.execute(
        "UPDATE job_batches SET succeeded = succeeded + ?, failed = failed + ?,"
        " last_finished_at = ? WHERE id = ?",
        (succeeded, 1 - succeeded, now, batch_id),
    )


def _job_view(row: tuple[Any, ...]) -> JobView:
    return JobView(
        id=row[0],
        tenant=row[1],
        state=JobState(row[2]),
        created_at=row[3],
        expires_at=row[4],
        attempts=row[5],
        started=bool(row[6]),
        finished_at=row[7],
        status=row[8],
        body=row[9],
        batch_id=row[10],
        custom_id=row[11],
        line=row[12],
    )


def job(db: sqlite3.Connection, now: float, tenant: str, job_id: str) -> JobView | None:
    row = db.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ? AND tenant = ?",  # noqa: S608
        (job_id, tenant),
    ).fetchone()
    return _job_view(row) if row is not None else None


def _cancel_rows(
    db: sqlite3.Connection, now: float, where: str, args: tuple[Any, ...], result: JobResult
) -> list[NewJob]:
    rows = db.execute(
        "UPDATE jobs SET state = 'cancelled', status = ?, body = ?, finished_at = ?, keep_until = ?,"  # noqa: S608
        f" payload = NULL WHERE state = 'queued' AND {where}"
        " RETURNING id, tenant, payload, created_at, expires_at, batch_id, line, custom_id",
        (result.status, result.body, now, now + result.keep_s, *args),
    ).fetchall()
    return [NewJob(r[0], r[1], r[2] or b"", r[3], r[4], r[5], r[6], r[7]) for r in rows]


def cancel_job(
    db: sqlite3.Connection, now: float, tenant: str, job_id: str, result: JobResult
) -> NewJob | None:
    # The payload is read before the update clears it: the caller releases what it reserved.
    payload = db.execute("SELECT payload FROM jobs WHERE id = ? AND tenant = ?", (job_id, tenant)).fetchone()
    cancelled = _cancel_rows(db, now, "id = ? AND tenant = ?", (job_id, tenant), result)
    if not cancelled:
        return None
    job = cancelled[0]
    if job.batch_id is not None:
        _count_in_batch(db, now, job.batch_id, JobState.CANCELLED)
    return NewJob(
        job.id, job.tenant, payload[0], job.created_at, job.expires_at, job.batch_id, job.line, job.custom_id
    )


def put_file(db: sqlite3.Connection, now: float, file: StoredFile, content: bytes) -> None:
    db.execute(
        "INSERT INTO job_files (id, tenant, purpose, filename, bytes, created_at, expires_at, content)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            file.id,
            file.tenant,
            file.purpose,
            file.filename,
            file.bytes,
            file.created_at,
            file.expires_at,
            content,
        ),
    )


def file(db: sqlite3.Connection, now: float, tenant: str, file_id: str) -> StoredFile | None:
    row = db.execute(
        "SELECT id, tenant, purpose, filename, bytes, created_at, expires_at FROM job_files"
        " WHERE id = ? AND tenant = ?",
        (file_id, tenant),
    ).fetchone()
    return StoredFile(*row) if row is not None else None


def file_content(db: sqlite3.Connection, now: float, tenant: str, file_id: str) -> bytes | None:
    row = db.execute(
        "SELECT content FROM job_files WHERE id = ? AND tenant = ?", (file_id, tenant)
    ).fetchone()
    return bytes(row[0]) if row is not None else None


def files(db: sqlite3.Connection, now: float, tenant: str, limit: int) -> list[StoredFile]:
    rows = db.execute(
        "SELECT id, tenant, purpose, filename, bytes, created_at, expires_at FROM job_files"
        " WHERE tenant = ? ORDER BY created_at DESC, id DESC LIMIT ?",
        (tenant, limit),
    ).fetchall()
    return [StoredFile(*row) for row in rows]


def delete_file(db: sqlite3.Connection, now: float, tenant: str, file_id: str) -> bool:
    return db.execute("DELETE FROM job_files WHERE id = ? AND tenant = ?", (file_id, tenant)).rowcount == 1


def create_batch(
    db: sqlite3.Connection,
    now: float,
    batch: NewBatch,
    jobs: list[NewJob],
    refused: list[tuple[NewJob, JobResult]],
) -> None:
    db.execute(
        "INSERT INTO job_batches (id, tenant, record, created_at, total, failed, keep_until)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            batch.id,
            batch.tenant,
            batch.to_json(),
            batch.created_at,
            len(jobs) + len(refused),
            len(refused),
            batch.keep_until,
        ),
    )
    insert_jobs(db, now, jobs)
    db.executemany(
        "INSERT INTO jobs (id, tenant, batch_id, line, custom_id, state, visible_at, created_at, expires_at,"
        " finished_at, status, body, keep_until) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?)",
        [
            (
                j.id,
                j.tenant,
                j.batch_id,
                j.line,
                j.custom_id,
                r.state.value,
                j.created_at,
                j.expires_at,
                now,
                r.status,
                r.body,
                now + r.keep_s,
            )
            for j, r in refused
        ],
    )


_BATCH_COLUMNS = "record, total, succeeded, failed, cancel_requested_at, last_finished_at"


def _batch_view(row: tuple[Any, ...]) -> BatchView:
    return BatchView(NewBatch.from_json(row[0]), row[1], row[2], row[3], row[4], row[5])


def batch(db: sqlite3.Connection, now: float, tenant: str, batch_id: str) -> BatchView | None:
    row = db.execute(
        f"SELECT {_BATCH_COLUMNS} FROM job_batches WHERE id = ? AND tenant = ?",  # noqa: S608
        (batch_id, tenant),
    ).fetchone()
    return _batch_view(row) if row is not None else None


def batches(
    db: sqlite3.Connection, now: float, tenant: str, after: str | None, limit: int
) -> list[BatchView]:
    if after is not None:
        anchor = db.execute(
            "SELECT created_at FROM job_batches WHERE id = ? AND tenant = ?", (after, tenant)
        ).fetchone()
        if anchor is None:
            return []
        rows = db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM job_batches WHERE tenant = ? AND (created_at < ? OR"  # noqa: S608 (constant SQL text)
            " (created_at = ? AND id < ?)) ORDER BY created_at DESC, id DESC LIMIT ?",
            (tenant, anchor[0], anchor[0], after, limit),
        ).fetchall()
    else:
        rows = db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM job_batches WHERE tenant = ?"  # noqa: S608 (constant columns)
            " ORDER BY created_at DESC, id DESC LIMIT ?",
            (tenant, limit),
        ).fetchall()
    return [_batch_view(row) for row in rows]


def batch_jobs(db: sqlite3.Connection, now: float, tenant: str, batch_id: str) -> list[JobView]:
    rows = db.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE batch_id = ? AND tenant = ? ORDER BY line",  # noqa: S608
        (batch_id, tenant),
    ).fetchall()
    return [_job_view(row) for row in rows]


def cancel_batch(
    db: sqlite3.Connection, now: float, tenant: str, batch_id: str, result: JobResult
) -> list[NewJob] | None:
    found = db.execute(
        "UPDATE job_batches SET cancel_requested_at = COALESCE(cancel_requested_at, ?)"
        " WHERE id = ? AND tenant = ? RETURNING id",
        (now, batch_id, tenant),
    ).fetchone()
    if found is None:
        return None
    payloads = dict(
        db.execute(
            "SELECT id, payload FROM jobs WHERE batch_id = ? AND state = 'queued'", (batch_id,)
        ).fetchall()
    )
    cancelled = _cancel_rows(db, now, "batch_id = ?", (batch_id,), result)
    if cancelled:
        db.execute(
            "UPDATE job_batches SET failed = failed + ?, last_finished_at = ? WHERE id = ?",
            (len(cancelled), now, batch_id),
        )
    return [
        NewJob(
            j.id,
            j.tenant,
            payloads.get(j.id) or b"",
            j.created_at,
            j.expires_at,
            j.batch_id,
            j.line,
            j.custom_id,
        )
        for j in cancelled
    ]


def put_webhook(db: sqlite3.Connection, now: float, hook: Webhook) -> None:
    db.execute(
        "INSERT INTO job_webhooks (id, tenant, url, secret, created_at) VALUES (?, ?, ?, ?, ?)",
        (hook.id, hook.tenant, hook.url, hook.secret, hook.created_at),
    )


def webhooks(db: sqlite3.Connection, now: float, tenant: str) -> list[Webhook]:
    rows = db.execute(
        "SELECT id, tenant, url, secret, created_at FROM job_webhooks WHERE tenant = ?"
        " ORDER BY created_at, id",
        (tenant,),
    ).fetchall()
    return [Webhook(*row) for row in rows]


def delete_webhook(db: sqlite3.Connection, now: float, tenant: str, hook_id: str) -> bool:
    cursor = db.execute("DELETE FROM job_webhooks WHERE id = ? AND tenant = ?", (hook_id, tenant))
    return cursor.rowcount == 1


def depth(db: sqlite3.Connection, now: float) -> list[QueueDepth]:
    # Two scans, one per state's partial index, rather than one over every job kept.
    rows = db.execute(
        "SELECT tenant, SUM(queued), SUM(running), MIN(created_at) FROM ("
        " SELECT tenant, 1 AS queued, 0 AS running, created_at FROM jobs WHERE state = 'queued' UNION ALL"
        " SELECT tenant, 0, 1, created_at FROM jobs WHERE state = 'running'"
        ") GROUP BY tenant ORDER BY tenant"
    ).fetchall()
    return [QueueDepth(tenant, queued, running, oldest) for tenant, queued, running, oldest in rows]


def purge(db: sqlite3.Connection, now: float) -> int:
    gone = db.execute("DELETE FROM jobs WHERE keep_until IS NOT NULL AND keep_until < ?", (now,)).rowcount
    gone += db.execute("DELETE FROM job_batches WHERE keep_until < ?", (now,)).rowcount
    gone += db.execute("DELETE FROM job_files WHERE expires_at < ?", (now,)).rowcount
    return gone
