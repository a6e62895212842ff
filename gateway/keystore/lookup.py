"""A presented key's principal: the config's keys first, then the live keys."""

from __future__ import annotations

from gateway.exchange import Principal
from gateway.keys import KeyRing, digest_of
from gateway.keystore.cache import LiveKeyCache


class KeyLookup:
    """One hash of the presented key, looked up in the config's table, then the live one."""

    def __init__(self, static: KeyRing, live: LiveKeyCache) -> None:
        self.static = static  # replaced whole when the config reloads
        self._live = live

    def authenticate(self, presented: str) -> Principal | None:
        digest = digest_of(presented)
        return self.static.find(digest) or self._live.find(digest)
