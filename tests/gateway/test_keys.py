"""API keys: minted once, stored as SHA-256 hashes, looked up by digest."""

from __future__ import annotations

import hashlib
import re

from gateway.exchange import Principal, Tenant
from gateway.keys import KeyRing, generate_key, hash_key, key_id

ALPHA = Principal(Tenant("alpha"), "k-alpha")
BETA = Principal(Tenant("beta", frozenset({"chat"})), "k-beta")


def test_generated_keys_are_prefixed_random_and_url_safe() -> None:
    keys = {generate_key() for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert re.fullmatch(r"tg-[A-Za-z0-9_-]{43}", key)


def test_hash_is_prefixed_sha256_hex() -> None:
    assert hash_key("tg-abc") == "sha256:" + hashlib.sha256(b"tg-abc").hexdigest()


def test_key_id_is_a_short_prefix_of_the_digest() -> None:
    stored = hash_key("tg-abc")
    assert key_id(stored) == hashlib.sha256(b"tg-abc").hexdigest()[:12]


def test_keyring_finds_the_principal_of_each_key() -> None:
    ring = KeyRing([(hash_key("tg-a"), ALPHA), (hash_key("tg-b"), BETA)])
    assert len(ring) == 2
    assert ring.authenticate("tg-a") is ALPHA
    assert ring.authenticate("tg-b") is BETA


def test_keyring_rejects_unknown_and_near_miss_keys() -> None:
    ring = KeyRing([(hash_key("tg-a"), ALPHA)])
    for presented in (
        "tg-b",
        "tg-a ",
        "TG-A",
        "",
        hash_key("tg-a"),
        hash_key("tg-a").removeprefix("sha256:"),
    ):
        assert ring.authenticate(presented) is None
