"""The doors' routes beside their model calls: stored responses (`GET` and `DELETE
/v1/responses/{id}`, `POST /v1/responses/{id}/cancel` for background ones,
`GET /v1/responses/{id}/input_items`), `POST /v1/messages/count_tokens`, and `GET /v1/models` and
`/v1/models/{id}`, which both APIs' clients call (in Anthropic's format when the request
carries `anthropic-version`).

Each authenticates as its door does (the models routes take the key in either header); a
model alias the key may not use gets the same 404 as an unknown one, so a key cannot probe
for other tenants' models.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from gateway.doors.background import BackgroundJobs, BackgroundResponses
from gateway.doors.input_items import page
from gateway.doors.messages import MessagesDoor
from gateway.doors.messages_request import chat_body
from gateway.doors.responses import ResponsesDoor, not_found
from gateway.errors import MethodNotAllowed, NotFound, model_not_found
from gateway.exchange import Principal
from gateway.validation import parse_json_object

COUNT_TOKENS = "/v1/messages/count_tokens"
_RESPONSES = "/v1/responses/"
_MODELS = "/v1/models/"
_MODELS_LIST = "/v1/models"
_BYTES_PER_TOKEN = 4  # the same rough rate as the gateway's own count of unreported usage


class DoorRoutes:
    def __init__(
        self,
        authenticate: Callable[[str | None], Principal],
        aliases_for: Callable[[Principal], list[str]],
        responses: ResponsesDoor,
        messages: MessagesDoor,
        jobs: BackgroundJobs | None = None,
    ) -> None:
        self._authenticate = authenticate
        self._aliases_for = aliases_for
        self._responses = responses
        self._messages = messages
        records = responses.records
        self._background = BackgroundResponses(records, jobs) if records is not None else None

    def with_jobs(self, jobs: BackgroundJobs | None) -> DoorRoutes:
        """The same routes, reading background responses' state from the async jobs."""
        return DoorRoutes(self._authenticate, self._aliases_for, self._responses, self._messages, jobs)

    def serves(self, path: str) -> bool:
        return path in (COUNT_TOKENS, _MODELS_LIST) or path.startswith((_RESPONSES, _MODELS))

    async def handle(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: Callable[[], Awaitable[bytes]],
        query: str = "",
    ) -> bytes:
        if path == COUNT_TOKENS:
            _require(method, "POST", path)
            principal = self._authenticate(self._messages.credential(headers))
            return await self._count_tokens(principal, await body())
        if path == _MODELS_LIST or path.startswith(_MODELS):
            _require(method, "GET", path)
            principal = self._authenticate(self._messages.credential(headers))  # either header
            anthropic = "anthropic-version" in headers
            if path == _MODELS_LIST:
                return self._models(principal, anthropic)
            return self._model(principal, path[len(_MODELS) :], anthropic)
        principal = self._authenticate(self._responses.credential(headers))
        response_id, _, action = path[len(_RESPONSES) :].partition("/")
        if not response_id or action not in ("", "cancel", "input_items"):
            raise NotFound(f"Unknown path {path[:200]}.", code="unknown_url")
        if action == "input_items":
            _require(method, "GET", f"{_RESPONSES}{{id}}/input_items")
            records = self._responses.records
            stored = await records.load(principal, response_id) if records is not None else None
            if stored is None:
                raise not_found(response_id)
            return orjson.dumps(page(stored.input, query))
        if action == "cancel":
            _require(method, "POST", f"{_RESPONSES}{{id}}/cancel")
            if self._background is None:
                raise not_found(response_id)
            return orjson.dumps(await self._background.cancel(principal, response_id))
        return await self._stored(method, principal, response_id)

    async def _stored(self, method: str, principal: Principal, response_id: str) -> bytes:
        if method == "DELETE":
            if self._background is None or not await self._background.delete(principal, response_id):
                raise not_found(response_id)
            return orjson.dumps({"id": response_id, "object": "response", "deleted": True})
        _require(method, "GET", f"{_RESPONSES}{{id}}")
        if self._background is None:
            raise not_found(response_id)
        return orjson.dumps(await self._background.retrieve(principal, response_id))

    async def _count_tokens(self, principal: Principal, raw: bytes) -> bytes:
        chat = chat_body(parse_json_object(raw), for_count=True)
        alias = chat["model"]
        if alias not in self._aliases_for(principal):
            raise model_not_found(alias)
        size = len(orjson.dumps(chat["messages"])) + len(orjson.dumps(chat.get("tools", [])))
        return orjson.dumps({"input_tokens": -(-size // _BYTES_PER_TOKEN)})

    def _model(self, principal: Principal, alias: str, anthropic: bool) -> bytes:
        if alias not in self._aliases_for(principal):
            raise model_not_found(alias)
        return orjson.dumps(_model(alias, anthropic))

    def _models(self, principal: Principal, anthropic: bool) -> bytes:
        models = [_model(alias, anthropic) for alias in self._aliases_for(principal)]
        if anthropic:
            first, last = (models[0]["id"], models[-1]["id"]) if models else (None, None)
            return orjson.dumps({"data": models, "has_more": False, "first_id": first, "last_id": last})
        return orjson.dumps({"object": "list", "data": models})


def _model(alias: str, anthropic: bool) -> dict[str, Any]:
    if anthropic:
        return {"type": "model", "id": alias, "display_name": alias, "created_at": "1970-01-01T00:00:00Z"}
    return {"id": alias, "object": "model", "created": 0, "owned_by": "tollgate"}


def _require(method: str, expected: str, path: str) -> None:
    if method != expected and not (expected == "GET" and method == "HEAD"):
        raise MethodNotAllowed(f"Use {expected} for {path}.")
