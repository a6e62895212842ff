"""Where the images of a chat request are: every `image_url` (or `input_image`) part of its
messages, with the parameter path that names it in an error. One walk shared by the stages
that look at images (destination checks, the input-token estimate)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def image_parts(messages: Any) -> Iterator[tuple[str, Any]]:
    """(param, URL) for every image part of the messages; the URL as the client sent it, which
    may be anything (the destination check refuses what is not a string)."""
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(part, dict):
                continue
            where = f"messages[{i}].content[{j}]"
            kind = part.get("type")
            image = part.get("image_url")
            if kind == "image_url" and isinstance(image, dict):
                yield f"{where}.image_url.url", image.get("url")
            elif kind in ("image_url", "input_image") and image is not None:
                yield f"{where}.image_url", image
