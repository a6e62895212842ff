"""A batch input file, governed as it is uploaded: no stored file holds what the policy masks.

Each request line goes through the request-side stages that decide what may be kept:

    admit -> label -> decide (logged) -> redact

with the upload's own credentials and headers, as one request of its own (its request id
is `{file id}:{line number}`, which the decision record carries). What is stored is the
line with its body as redaction left it: masked, or tokenised (the placeholders are kept
and the vault is not, as for any job: gateway/jobs/snapshot.py). A line those stages
refuse (malformed, denied by the policy, carrying data the policy blocks) is stored as its
error only, and fails with it, alone, when a batch is created from the file. A line's own
`max_tokens` is kept as the client wrote it: the cap in force is the decision's at the
batch's creation, when every line goes through the whole pipeline again.

A failure of the gateway's own (the policy engine unavailable, detection failing) refuses
the whole upload, nothing stored, rather than failing lines for a cause the client can retry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.jobs import batch_input
from gateway.pipeline import Pipeline, Stage

GOVERNING_STAGES = frozenset({"admit", "label", "decide", "redact"})
_AT_ONCE = 16  # lines going through the stages together
_KEPT_AS_WRITTEN = ("max_tokens", "max_completion_tokens")
_STAGE_DEADLINE_S = 60.0
_DROPPED_HEADERS = frozenset({"content-type", "content-length", "content-encoding", "idempotency-key"})


class InputFiles:
    def __init__(self, pipeline: Callable[[], Pipeline]) -> None:
        self._pipeline = pipeline

    async def govern(self, file_id: str, content: bytes, headers: Mapping[str, str], max_lines: int) -> bytes:
        """The file as it may be stored, one line per non-empty line of `content`; a file of
        more than `max_lines` requests (no batch could use it) is refused before any is decided."""
        lines = batch_input.request_lines(content)
        if len(lines) > max_lines:
            raise batch_input.too_many_lines(len(lines), max_lines, "file")
        stages = [stage for stage in self._pipeline().stages if stage.name in GOVERNING_STAGES]
        kept_headers = {k: v for k, v in headers.items() if k not in _DROPPED_HEADERS}
        gate = asyncio.Semaphore(_AT_ONCE)

        async def one(index: int, raw: bytes) -> bytes:
            line = batch_input.read_request(index, raw)
            if line.error is not None:
                return batch_input.stored_refusal(line.custom_id, line.error)
            async with gate:
                return await _governed(stages, f"{file_id}:{index + 1}", line, kept_headers)

        tasks = [asyncio.ensure_future(one(index, raw)) for index, raw in enumerate(lines)]
        try:
            stored = await asyncio.gather(*tasks)
        except BaseException:  # the upload is refused: the lines still waiting are not decided
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return b"".join(line + b"\n" for line in stored)


async def _governed(
    stages: list[Stage], request_id: str, line: batch_input.BatchLine, headers: Mapping[str, str]
) -> bytes:
    now = time.monotonic()
    exchange = Exchange(
        request_id=request_id,
        endpoint=batch_input.ENDPOINTS[line.url],
        received_at=now,
        deadline=now + _STAGE_DEADLINE_S,
        headers=headers,
        raw_body=line.body,
        job_id=request_id,  # an async submission: the policy input says so, and nothing is deferred
    )
    try:
        for stage in stages:
            await stage(exchange)
    except GatewayError as exc:
        if exc.status >= 500:
            raise
        return batch_input.stored_refusal(line.custom_id, exc)
    body = exchange.body
    written: dict[str, Any] = orjson.loads(line.body)
    for name in _KEPT_AS_WRITTEN:
        if name in written:
            body[name] = written[name]
        else:
            body.pop(name, None)
    return batch_input.stored_request(line, body)
