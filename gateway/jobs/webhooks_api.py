"""`/v1/webhooks`: a tenant registers the URLs its completion events go to.

A URL must be one the tenant may send to, like any outbound destination: the policy's
`destinations.webhook_url` within the operator's bound (gateway/jobs/webhook_destinations.py),
the decision logged; never a private, loopback or link-local address unless both allow it.
The secret that signs the events is shown once, when the webhook is registered.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.errors import InvalidRequest, MethodNotAllowed, NotFound
from gateway.exchange import Principal
from gateway.jobs.api_types import ApiAnswer, ApiRequest
from gateway.jobs.records import Webhook
from gateway.jobs.store import JobStore
from gateway.jobs.webhook_destinations import WebhookDestinations
from gateway.jobs.webhooks import new_secret
from gateway.tools.destinations import has_unsafe_chars
from gateway.validation import parse_json_object

_MAX_HOOKS = 16
_MAX_URL = 2048


class WebhooksApi:
    def __init__(
        self, store: JobStore, destinations: WebhookDestinations, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._destinations = destinations
        self._clock = clock

    async def handle(self, request: ApiRequest, principal: Principal, rest: list[str]) -> ApiAnswer:
        tenant = principal.tenant.name
        if not rest and request.method == "POST":
            body = parse_json_object(await request.read_body(16 * 1024))
            return _json(await self._register(principal, body, request.request_id))
        if not rest and request.method in ("GET", "HEAD"):
            hooks = await self._store.webhooks(tenant)
            return _json({"object": "list", "data": [_shown(hook) for hook in hooks]})
        if len(rest) == 1 and request.method == "DELETE":
            if not await self._store.delete_webhook(tenant, rest[0]):
                raise NotFound(f"No such webhook: {rest[0]!r}.", code="webhook_not_found")
            return _json({"id": rest[0], "object": "webhook_endpoint.deleted", "deleted": True})
        raise MethodNotAllowed("Use POST or GET for /v1/webhooks, DELETE for /v1/webhooks/{id}.")

    async def _register(self, principal: Principal, body: dict[str, Any], request_id: str) -> dict[str, Any]:
        tenant = principal.tenant.name
        url = body.get("url")
        if not isinstance(url, str) or not url or len(url) > _MAX_URL or has_unsafe_chars(url):
            raise InvalidRequest("'url' must be an absolute URL.", param="url")
        refusal = await self._destinations.refusal(tenant, principal, url, request_id)
        if refusal is not None:
            raise InvalidRequest(refusal, param="url", code="url_not_allowed")
        if len(await self._store.webhooks(tenant)) >= _MAX_HOOKS:
            raise InvalidRequest(
                f"A tenant may register at most {_MAX_HOOKS} webhooks.", code="too_many_webhooks"
            )
        hook = Webhook(f"wh_{os.urandom(10).hex()}", tenant, url, new_secret(), self._clock())
        await self._store.put_webhook(hook)
        return {**_shown(hook), "secret": hook.secret}


def _shown(hook: Webhook) -> dict[str, Any]:
    return {"id": hook.id, "object": "webhook_endpoint", "url": hook.url, "created_at": int(hook.created_at)}


def _json(document: dict[str, Any]) -> ApiAnswer:
    return ApiAnswer(200, orjson.dumps(document))
