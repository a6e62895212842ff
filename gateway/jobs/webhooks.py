"""Completion events for the tenant's webhooks: durable, signed, retried, at least once.

A finished job (or batch) becomes one delivery per registered webhook, and each delivery is
itself a job in the same durable queue, under an id made of the event's subject and the
webhook's (so an event emitted twice, by two workers finishing a batch's last lines at once,
is stored once). A worker that claims a delivery posts it; a receiver that fails (no 2xx, no
answer) gets it again after a backoff, up to `jobs.webhook_attempts` times.

Signed as Standard Webhooks sign (standardwebhooks.com): headers `webhook-id` (the delivery's
id, the same on every retry, for the receiver to drop duplicates), `webhook-timestamp` (unix
seconds) and `webhook-signature`: `v1,` + base64 of HMAC-SHA256, keyed by the base64-decoded
part of the secret after `whsec_`, over `{webhook-id}.{webhook-timestamp}.{body}`. The body:

    {"id": "whk_...", "object": "event", "type": "job.completed", "created_at": 1767225600,
     "data": {"id": "job_...", "status": "completed", "location": "/v1/async/job_..."}}

Types: `job.completed`, `job.failed` (a `Prefer: respond-async` job), `batch.completed`,
`batch.cancelled`. The event carries ids only: the result is fetched with the tenant's key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.config import JobsConfig
from gateway.errors import GatewayError
from gateway.jobs import snapshot
from gateway.jobs.records import Claim, JobResult, JobState, NewJob, Webhook
from gateway.jobs.store import JobStore
from gateway.jobs.webhook_destinations import WebhookDestinations
from gateway.ports import WebhookSender

logger = logging.getLogger("tollgate.jobs")

DELIVERY_PREFIX = "whk_"
KIND = "webhook"
_HOOKS_CACHE_S = 1.0  # the tenant's webhook list is read at most this often per worker
_DELIVERY_WINDOW_S = 86_400.0
KEEP_S = 86_400.0  # a delivery's record, kept for a retried event to be recognised


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class Webhooks:
    def __init__(
        self,
        store: JobStore,
        sender: WebhookSender,
        config: JobsConfig,
        destinations: WebhookDestinations,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._destinations = destinations
        self._sender = sender
        self._config = config
        self._clock = clock
        self._hooks: dict[str, tuple[float, list[Webhook]]] = {}

    async def _hooks_of(self, tenant: str) -> list[Webhook]:
        now = time.monotonic()
        cached = self._hooks.get(tenant)
        if cached is not None and now - cached[0] < _HOOKS_CACHE_S:
            return cached[1]
        hooks = await self._store.webhooks(tenant)
        self._hooks[tenant] = (now, hooks)
        return hooks

    async def notify(self, claim: Claim, result: JobResult) -> None:
        """After a job's result is stored: its event, or its batch's once the batch is done."""
        hooks = await self._hooks_of(claim.tenant)
        if not hooks:
            return
        if claim.batch_id is None:
            kind = "completed" if result.state is JobState.SUCCEEDED else "failed"
            data = {"id": claim.id, "status": kind, "location": f"/v1/async/{claim.id}"}
            await self._emit(claim.tenant, hooks, f"job.{kind}", claim.id, data)
            return
        view = await self._store.batch(claim.tenant, claim.batch_id)
        if view is None or view.done < view.total:
            return
        kind = "cancelled" if view.cancel_requested_at is not None else "completed"
        data = {"id": claim.batch_id, "status": kind}
        await self._emit(claim.tenant, hooks, f"batch.{kind}", claim.batch_id, data)

    async def _emit(
        self, tenant: str, hooks: list[Webhook], event: str, subject: str, data: dict[str, Any]
    ) -> None:
        now = self._clock()
        deliveries = [
            NewJob(
                f"{DELIVERY_PREFIX}{subject}_{hook.id}",
                tenant,
                snapshot.encode(
                    {"kind": KIND, "hook": hook.id, "type": event, "created_at": int(now), "data": data}
                ),
                now,
                now + _DELIVERY_WINDOW_S,
            )
            for hook in hooks
        ]
        await self._store.submit(deliveries)

    async def deliver(self, claim: Claim, document: dict[str, Any]) -> bool | None:
        """Post the delivery: True when the receiver took it (2xx), False when it did not (or
        the policy could not be asked), None when its webhook was deleted meanwhile or the
        policy no longer lets it point where it does (nothing to deliver to)."""
        hook = next((h for h in await self._store.webhooks(claim.tenant) if h.id == document["hook"]), None)
        if hook is None:
            return None
        try:
            refusal = await self._destinations.refusal(claim.tenant, None, hook.url, claim.id)
        except GatewayError as exc:  # no decision now (the engine unavailable): a later attempt
            logger.warning(
                "webhook delivery waits for a policy decision", extra={"job_id": claim.id, "error": exc.code}
            )
            return False
        if refusal is not None:
            logger.warning(
                "webhook delivery dropped: its URL is no longer allowed",
                extra={"job_id": claim.id, "tenant": claim.tenant, "webhook": hook.id, "why": refusal},
            )
            return None
        body = orjson.dumps(
            {
                "id": claim.id,
                "object": "event",
                "type": document["type"],
                "created_at": document["created_at"],
                "data": document["data"],
            }
        )
        timestamp = int(self._clock())
        headers = {
            "content-type": "application/json",
            "webhook-id": claim.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(hook.secret, claim.id, timestamp, body),
        }
        status = await self._sender.post(hook.url, body, headers, self._config.webhook_timeout_s)
        return status is not None and 200 <= status < 300

    def retry_in(self, attempt: int) -> float:
        return float(min(60.0, self._config.webhook_retry_base_s * 2 ** min(attempt - 1, 16)))

    async def aclose(self) -> None:
        await self._sender.aclose()
