"""Operator credentials for /admin/* (`admin.tokens`: SHA-256 hashes, as for API keys; a
tenant's key never works), checked in constant time."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from gateway.errors import AuthenticationFailed
from gateway.keys import HASH_PREFIX


class OperatorTokens:
    def __init__(self, token_hashes: Sequence[str]) -> None:
        self._digests = [bytes.fromhex(h.removeprefix(HASH_PREFIX)) for h in token_hashes]

    def authorize(self, authorization: str | None) -> None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationFailed(
                "Missing operator credentials: send 'Authorization: Bearer <admin token>'.",
                code="missing_admin_token",
            )
        digest = hashlib.sha256(token.strip().encode()).digest()
        # Compare against every hash, so the time taken says nothing about which matched.
        if not sum(hmac.compare_digest(digest, known) for known in self._digests):
            raise AuthenticationFailed("Incorrect operator credentials.", code="invalid_admin_token")
