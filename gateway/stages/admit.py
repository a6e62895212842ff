"""admit: who is calling, is the body well-formed, which session is it."""

from __future__ import annotations

import hashlib

from gateway.errors import AuthenticationFailed
from gateway.exchange import Endpoint, Exchange, Principal
from gateway.keys import Authenticator
from gateway.validation import parse_json_object, validate

_SESSION_HEADERS = ("x-session-affinity", "x-session-id")


class Admit:
    name = "admit"

    def __init__(self, keyring: Authenticator) -> None:
        self._keyring = keyring

    async def __call__(self, exchange: Exchange) -> None:
        door = exchange.door
        headers = exchange.headers
        principal = self.authenticate(
            headers.get("authorization") if door is None else door.credential(headers)
        )
        exchange.principal = principal
        body = parse_json_object(exchange.raw_body)
        if door is not None:
            body = await door.request(body, exchange)  # the door's API in, the internal request out
        validate(exchange.endpoint, body)
        exchange.body = body
        exchange.model_alias = body["model"]
        if exchange.endpoint is Endpoint.CHAT:
            exchange.stream = body.get("stream") is True
            options = body.get("stream_options")
            exchange.client_wants_usage = isinstance(options, dict) and options.get("include_usage") is True
        exchange.session_key = _session_key(exchange, principal)

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise AuthenticationFailed(
                "Missing API key: send it as 'Authorization: Bearer <key>'.", code="missing_api_key"
            )
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthenticationFailed("Malformed Authorization header: expected 'Bearer <key>'.")
        principal = self._keyring.authenticate(key.strip())
        if principal is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        return principal


def _session_key(exchange: Exchange, principal: Principal) -> str | None:
    """The client's session id, scoped to its tenant and hashed, so that neither the raw value
    nor another tenant's sessions can be named upstream."""
    for name in _SESSION_HEADERS:
        value = exchange.headers.get(name)
        if value:
            return scoped_session_key(principal.tenant.name, value)
    return None


def scoped_session_key(tenant: str, session_id: str) -> str:
    """The key a tenant's session id is known by everywhere: upstream, stores, logs."""
    return hashlib.sha256(f"{tenant}\x00{session_id}".encode()).hexdigest()[:32]
