"""API keys: minted once, stored only as SHA-256 hashes, checked in constant time.

Keys are 256 random bits, so a fast hash is the right tool (as for GitHub or Stripe
tokens): a slow password hash would cost milliseconds per request and protect nothing
that brute force could reach. The lookup table is keyed by the digest, which reveals
nothing about the key; the final comparison is constant-time all the same.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from typing import Protocol

from gateway.exchange import Principal

KEY_PREFIX = "tg-"
HASH_PREFIX = "sha256:"


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def key_id(stored_hash: str) -> str:
    """A short, non-secret name for a key, safe for logs and metrics."""
    return stored_hash.removeprefix(HASH_PREFIX)[:12]


class Authenticator(Protocol):
    def authenticate(self, presented: str) -> Principal | None: ...


def digest_of(presented: str) -> bytes:
    return hashlib.sha256(presented.encode()).digest()


class KeyRing:
    def __init__(self, entries: Iterable[tuple[str, Principal]]) -> None:
        self._by_digest: dict[bytes, tuple[bytes, Principal]] = {}
        for stored_hash, principal in entries:
            digest = bytes.fromhex(stored_hash.removeprefix(HASH_PREFIX))
            self._by_digest[digest] = (digest, principal)

    def __len__(self) -> int:
        return len(self._by_digest)

    def authenticate(self, presented: str) -> Principal | None:
        return self.find(digest_of(presented))

    def find(self, digest: bytes) -> Principal | None:
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            return None
        return found[1]
