"""Operator credentials for /admin/*: `admin.tokens` in the config holds their SHA-256 hashes
(as for API keys; a tenant's key never works). A credential is named in logs and audit
records by the short id of its hash, never by the token."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from gateway.errors import AuthenticationFailed
from gateway.keys import HASH_PREFIX, key_id


class AdminCredentials:
    def __init__(self, token_hashes: Sequence[str]) -> None:
        self._known = [(bytes.fromhex(h.removeprefix(HASH_PREFIX)), key_id(h)) for h in token_hashes]

    def authorize(self, authorization: str | None) -> str:
        """The id of the credential presented ("admin:<short hash id>"); 401 otherwise."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationFailed(
                "Missing operator credentials: send 'Authorization: Bearer <admin token>'.",
                code="missing_admin_token",
            )
        digest = hashlib.sha256(token.strip().encode()).digest()
        # Compare against every hash, so the time taken says nothing about which matched.
        matched = [name for known, name in self._known if hmac.compare_digest(digest, known)]
        if not matched:
            raise AuthenticationFailed("Incorrect operator credentials.", code="invalid_admin_token")
        return f"admin:{matched[0]}"
