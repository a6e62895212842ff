"""Image parts of chat messages: checked, and counted as a fixed number of prompt tokens.

An ``image_url`` part (``{"type": "image_url", "image_url": {"url", "detail"?}}``) must carry an
``http(s)://`` URL or a ``data:image/...`` URI. For the tokenizer, its URL is replaced by a short
digest (so a base64 image does not count as its bytes, yet two different images never share a
cache prefix) and the image adds ``IMAGE_TOKENS[detail]`` prompt tokens (the simulator's choice,
in the range real vision models report).
"""

from __future__ import annotations

import hashlib
from typing import Any

from simulator.answers import BadRequest

IMAGE_TOKENS = {"low": 85, "high": 765, "auto": 765}
_URL_PREFIXES = ("http://", "https://", "data:image/")


def _image_tokens(part: dict[str, Any]) -> tuple[dict[str, Any], int]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url[:11].lower().startswith(_URL_PREFIXES):  # schemes ignore case
        raise BadRequest("image_url.url must be an http(s) URL or a data:image/ URI")
    detail = image.get("detail", "auto") if isinstance(image, dict) else "auto"
    if detail not in IMAGE_TOKENS:
        raise BadRequest("image_url.detail must be 'auto', 'low' or 'high'")
    digest = hashlib.blake2b(url.encode(), digest_size=8).hexdigest()
    return {"type": "image_url", "image_url": {"url": digest, "detail": detail}}, IMAGE_TOKENS[detail]


def counted_messages(messages: list[Any]) -> tuple[list[Any], int]:
    """``messages`` with image URLs replaced by digests, and the images' tokens.

    Returns ``messages`` itself (no copy) when it has no image part, the common case.
    """
    for message in messages:
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            break
    else:
        return messages, 0
    image_tokens = 0
    result: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            result.append(message)
            continue
        parts: list[Any] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                replaced, tokens = _image_tokens(part)
                parts.append(replaced)
                image_tokens += tokens
            else:
                parts.append(part)
        result.append({**message, "content": parts})
    return result, image_tokens
