"""/admin/keys: live keys for operators, behind the same credentials as /admin/spend.

    POST   /admin/keys                 a new key (KeySpec); 201 with the key, shown once
    GET    /admin/keys?tenant=NAME     the keys (every tenant's without `tenant`)
    GET    /admin/keys/{id}            one key
    DELETE /admin/keys/{id}            revoke it; every replica refuses it within a second
    POST   /admin/keys/{id}/rotate     a new key in its place (RotateSpec); the old one works
                                       for `overlap_s` more; 201 with the new key, shown once

Keys are shown without their hash; errors are OpenAI-format, as everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs

import orjson
from pydantic import BaseModel, ValidationError

from gateway.admin_auth import AdminCredentials
from gateway.errors import InvalidRequest, MethodNotAllowed, NotFound
from gateway.keystore.cache import now_ms
from gateway.keystore.operations import KeyOperations, KeySpec, RotateSpec, view

M = TypeVar("M", bound=BaseModel)

PREFIX = "/admin/keys"


@dataclass(frozen=True, slots=True)
class AdminCall:
    method: str
    path: str
    query: str
    authorization: str | None
    body: bytes
    request_id: str


class KeysAdmin:
    def __init__(self, credentials: AdminCredentials, operations: KeyOperations) -> None:
        self._credentials = credentials
        self._operations = operations

    async def __call__(self, call: AdminCall) -> tuple[int, bytes]:
        """(status, JSON body); a GatewayError for anything refused."""
        by = self._credentials.authorize(call.authorization)
        parts = call.path[len(PREFIX) :].strip("/").split("/") if call.path != PREFIX else []
        ops = self._operations
        if not parts:
            if call.method == "POST":
                secret, key = await ops.create(_parsed(KeySpec, call.body), by, call.request_id)
                return 201, orjson.dumps({**view(key, now_ms()), "key": secret})
            if call.method in ("GET", "HEAD"):
                tenant = _tenant_filter(call.query)
                keys = await ops.listing(tenant)
                now = now_ms()
                return 200, orjson.dumps({"object": "list", "data": [view(k, now) for k in keys]})
            raise MethodNotAllowed(f"Use GET or POST for {PREFIX}.")
        key_id = parts[0]
        if len(parts) == 1:
            if call.method in ("GET", "HEAD"):
                return 200, orjson.dumps(view(await ops.get(key_id), now_ms()))
            if call.method == "DELETE":
                return 200, orjson.dumps(view(await ops.revoke(key_id, by, call.request_id), now_ms()))
            raise MethodNotAllowed(f"Use GET or DELETE for {PREFIX}/{{id}}.")
        if len(parts) == 2 and parts[1] == "rotate":
            if call.method != "POST":
                raise MethodNotAllowed(f"Use POST for {PREFIX}/{{id}}/rotate.")
            spec = _parsed(RotateSpec, call.body or b"{}")
            secret, old, new = await ops.rotate(key_id, spec, by, call.request_id)
            now = now_ms()
            return 201, orjson.dumps({**view(new, now), "key": secret, "replaces": view(old, now)})
        raise NotFound(f"Unknown path {call.path}.", code="unknown_url")


def _tenant_filter(query: str) -> str | None:
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"tenant"})
    if unknown:
        raise InvalidRequest(f"Unknown query parameter {unknown[0]!r}.", param=unknown[0])
    values = params.get("tenant")
    return values[-1] if values else None


def _parsed(model: type[M], body: bytes) -> M:
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequest("The body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        raise InvalidRequest(
            f"{where or 'body'}: {first['msg']}", param=where, code="invalid_value"
        ) from None
