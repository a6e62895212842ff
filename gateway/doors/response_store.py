"""Stored responses: what `previous_response_id`, `GET /v1/responses/{id}` and delete read.

A record holds the response object as the client got it, the conversation up to and
including it, as internal chat messages (without instructions, which OpenAI does not carry
to the next turn either), and its request's input items (`GET /v1/responses/{id}/input_items`).
All are redacted with the scrubber of everything persisted before
they are written, so a stored conversation never holds what the decision log would not. The
store key is a hash of the tenant and the response id: one tenant cannot read, continue or
delete another's responses, and the id itself is not stored in the clear.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from gateway.exchange import Principal


class ResponseStore(Protocol):
    """Where stored responses live (adapters/responses: SQLite by default, or Redis)."""

    async def put(self, key: str, record: bytes, ttl_s: int) -> None: ...

    async def get(self, key: str) -> bytes | None:
        """The record, or None when there is none or it has expired."""
        ...

    async def delete(self, key: str) -> bool:
        """True when a record was there."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    messages: list[dict[str, Any]]
    input: list[dict[str, Any]] = field(default_factory=list)  # the request's input items


def store_key(principal: Principal, response_id: str) -> str:
    scoped = f"{principal.tenant.name}\x00{response_id}".encode()
    return hashlib.sha256(scoped).hexdigest()


class ResponseRecords:
    """Reads and writes response records; `scrub` redacts a record before it is written."""

    def __init__(self, store: ResponseStore, retention_s: int, scrub: Callable[[Any], Any]) -> None:
        self._store = store
        self.retention_s = retention_s
        self._scrub = scrub

    async def save(self, principal: Principal, response_id: str, record: StoredResponse) -> None:
        data = self._scrub({"response": record.response, "messages": record.messages, "input": record.input})
        await self._store.put(store_key(principal, response_id), orjson.dumps(data), self.retention_s)

    async def load(self, principal: Principal, response_id: str) -> StoredResponse | None:
        raw = await self._store.get(store_key(principal, response_id))
        if raw is None:
            return None
        data = orjson.loads(raw)
        return StoredResponse(data["response"], data["messages"], data.get("input", []))

    async def delete(self, principal: Principal, response_id: str) -> bool:
        return await self._store.delete(store_key(principal, response_id))

    async def aclose(self) -> None:
        await self._store.aclose()
