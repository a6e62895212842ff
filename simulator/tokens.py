"""The simulator's deterministic tokenizer.

Prompt side: the prompt is the UTF-8 JSON serialisation (orjson) of ``tools`` (when present)
followed by that of ``messages``; every 4 bytes of it count as one token (at least 1 token).
Because a list's serialisation minus its closing bracket is a prefix of the serialisation of
any longer list with the same leading items, the next turn of a conversation shares a byte
prefix, hence a token prefix, with the previous one, which is what the prefix cache needs.

Completion side: text is split into "words" (a run of non-space characters with the
whitespace before it); each word is one token. ``"tok0 tok1"`` is two tokens, so a
``max_tokens`` cut always falls on a word boundary and the default stream sends one token per
chunk.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

BYTES_PER_TOKEN = 4
_WORDS = re.compile(r"\s*\S+|\s+")


def prompt_bytes(messages: list[Any], tools: Any) -> bytes:
    """The byte stream the prompt tokens are cut from."""
    if tools:
        return orjson.dumps(tools) + orjson.dumps(messages)
    return orjson.dumps(messages)


def count_bytes_tokens(data: bytes) -> int:
    """Tokens in a byte stream: one per 4 bytes, rounded up, at least 1."""
    return max(1, -(-len(data) // BYTES_PER_TOKEN))


def count_text_tokens(text: str) -> int:
    """Prompt-side token count of a plain string (used for embedding inputs)."""
    return count_bytes_tokens(text.encode())


def split_words(text: str) -> list[str]:
    """Completion tokens of ``text``; joining them gives ``text`` back."""
    return _WORDS.findall(text)


def block_keys(data: bytes, block_tokens: int) -> list[int]:
    """Keys of the prompt's full blocks; key i hashes every byte up to the end of block i.

    Chaining the previous key into each hash makes equal keys mean equal prefixes (up to
    64-bit collisions), so a block can only hit when everything before it matched too.
    """
    step = block_tokens * BYTES_PER_TOKEN
    keys: list[int] = []
    key = 0
    for start in range(0, len(data) - step + 1, step):
        key = hash((key, data[start : start + step]))
        keys.append(key)
    return keys
