"""The session key of a conversation that did not name its session: its "prompt family".

Every turn of an agent's conversation resends the same opening (the system prompt and the
first user message) and appends to it, so a hash of that opening, scoped to the tenant,
names the conversation as well as a session header would. Conversations that open the
same way share a key, and their prompts share a prefix, which is what affinity is for.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

_OPENING_ROLES = frozenset({"system", "developer"})
_SCAN = 4  # the opening is at the head of the list; never walk a long history


def prompt_family_key(tenant: str, body: dict[str, Any]) -> str | None:
    """The tenant-scoped hash of the first system and first user message; None without messages."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    system: Any = None
    user: Any = None
    for message in messages[:_SCAN]:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if system is None and role in _OPENING_ROLES:
            system = message.get("content")
        elif user is None and role == "user":
            user = message.get("content")
            break
    if system is None and user is None:
        return None
    opening = orjson.dumps([system, user], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(tenant.encode() + b"\x00" + opening, digest_size=16).hexdigest()
