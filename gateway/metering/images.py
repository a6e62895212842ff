"""Image tokens: what an `image_url` content part is estimated to cost, by a rule per model.

Vision models turn an image into a grid of patches, one token each, after resizing it to
their limits; the base64 text of a data URL says nothing about that count. The rule: an image
whose width and height can be read from the data URL's header (PNG, GIF, JPEG, WebP) is
ceil(width / patch_px) x ceil(height / patch_px) tokens, at most `max_per_image`; an image
given by URL (the upstream fetches it) or whose header cannot be read is `max_per_image`.
Both numbers are set per upstream model id (`metering.image_tokens`), so the estimate stays
an upper bound for the models a request may be routed to.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.image_parts import image_parts

_HEADER_BASE64_CHARS = 87_384  # 64 KiB once decoded: a JPEG's frame header is almost always within it


@dataclass(frozen=True, slots=True)
class ImageRule:
    patch_px: int
    max_per_image: int

    def tokens(self, url: str) -> int:
        size = image_size(url) if url.startswith("data:") else None
        if size is None:
            return self.max_per_image
        width, height = size
        patches = -(-width // self.patch_px) * -(-height // self.patch_px)
        return min(patches, self.max_per_image)


def image_urls(messages: Any) -> Iterator[str]:
    """The URL (or data URL) of every image part of the messages that gives one as text."""
    return (url for _, url in image_parts(messages) if isinstance(url, str))


def image_size(data_url: str) -> tuple[int, int] | None:
    """Width and height from a base64 data URL's image header, or None."""
    comma = data_url.find(",", 0, 256)
    if comma < 0 or not data_url[:comma].endswith(";base64"):
        return None
    head = data_url[comma + 1 : comma + 1 + _HEADER_BASE64_CHARS]
    head = head[: len(head) - len(head) % 4]
    try:
        data = base64.b64decode(head, validate=True)
    except (binascii.Error, ValueError):
        return None
    size = _png(data) or _gif(data) or _webp(data) or _jpeg(data)
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _png(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR" or len(data) < 24:
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _gif(data: bytes) -> tuple[int, int] | None:
    if data[:6] not in (b"GIF87a", b"GIF89a") or len(data) < 10:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return int(width), int(height)


def _webp(data: bytes) -> tuple[int, int] | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP" or len(data) < 30:
        return None
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


_JPEG_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _jpeg(data: bytes) -> tuple[int, int] | None:
    if data[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        if marker == 0xD8 or 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        at += 2 + int(length)
    return None
