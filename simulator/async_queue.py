"""Workers AI's async queue (``POST .../ai/run/{model}?queueRequest=true``).

- Queue: body ``{"requests": [input, ...]}`` (each a normal model input, optionally with an
  ``external_reference``); the answer is the ack ``{"status": "queued", "request_id", "model"}``
  in the ``/client/v4`` envelope.
- Poll: ``POST`` to the same model URL (with or without ``?queueRequest=true``) with
  ``{"request_id"}``. A batch advances one step per poll made while there is capacity (see
  ``simulator.capacity``): ``queued`` for ``SimConfig.queue_polls`` polls, then ``running`` for
  ``SimConfig.running_polls`` polls, then the result: ``{"responses": [{"id", "result",
  "success", "external_reference"}], "usage"}`` with the responses out of order (a fixed
  shuffle of the batch) and ``usage`` summed over them. Polling a finished batch again gives
  the same result.
"""

from __future__ import annotations

import threading
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_BATCH_BYTES = 10 * 1024 * 1024  # "total payload under 10 MB"

ItemAnswer = Callable[[dict[str, Any], int], tuple[dict[str, Any], bool, dict[str, int]]]


@dataclass(slots=True)
class Batch:
    request_id: str
    model: str
    items: list[dict[str, Any]]
    steps: int = 0  # polls that found capacity
    result: dict[str, Any] | None = field(default=None)


def validate_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = body.get("requests")
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise ValueError("'requests' must be a non-empty array of objects")
    return items


class AsyncQueue:
    """The batches queued on this simulator (shared by every replica, as one Cloudflare account)."""

    def __init__(self, queue_polls: int, running_polls: int) -> None:
        self.queue_polls = queue_polls
        self.running_polls = running_polls
        self._lock = threading.Lock()
        self._batches: dict[str, Batch] = {}

    def enqueue(self, model: str, items: list[dict[str, Any]]) -> Batch:
        batch = Batch(str(uuid.uuid4()), model, items)
        with self._lock:
            self._batches[batch.request_id] = batch
        return batch

    def get(self, request_id: str) -> Batch | None:
        with self._lock:
            return self._batches.get(request_id)

    def poll(self, batch: Batch, has_capacity: bool, answer: ItemAnswer) -> dict[str, Any]:
        """Advance ``batch`` one step (when there is capacity) and describe where it is."""
        if batch.result is not None:
            return batch.result
        if has_capacity:
            batch.steps += 1
        if batch.steps <= self.queue_polls:
            return {"status": "queued", "request_id": batch.request_id, "model": batch.model}
        if batch.steps <= self.queue_polls + self.running_polls:
            return {"status": "running", "request_id": batch.request_id, "model": batch.model}
        batch.result = self._finish(batch, answer)
        return batch.result

    @staticmethod
    def _finish(batch: Batch, answer: ItemAnswer) -> dict[str, Any]:
        responses = []
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        for index, item in enumerate(batch.items):
            result, success, item_usage = answer(item, index)
            for key in usage:
                usage[key] += item_usage.get(key, 0)
            response: dict[str, Any] = {"id": index, "result": result, "success": success}
            if "external_reference" in item:
                response["external_reference"] = item["external_reference"]
            responses.append(response)
        # Out of order, as the real queue finishes them: a fixed shuffle by request id.
        responses.sort(key=lambda r: zlib.crc32(f"{batch.request_id}:{r['id']}".encode()))
        return {"responses": responses, "usage": usage}
