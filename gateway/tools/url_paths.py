"""Path prefixes: may a tool argument's path (a URL's, or a file path) be read under these prefixes?

A path can be read more than one way: as written, percent-decoded once (a web server),
decoded again (a proxy in front of it, or a tool that decodes what it was given), and with
look-alike characters folded (Unicode NFKC: a two-dot leader is `..`, a fullwidth solidus
`/`). The path is allowed only when every reading is: each must be absolute, free of `..`
segments, backslashes and control characters, and under a prefix once its `.` segments
(harmless: `/a/./b` is `/a/b`) are dropped. Decoding repeats until nothing changes (at
most `_MAX_DECODES` times), so `%252e%252e` is caught as `..`; percent-encoding that is
not valid UTF-8 (`%c0%ae`, an overlong `.`) is refused. A segment's `;parameters` do not
hide a dot segment (`..;` is `..`).

Prefixes match whole segments: `/api` (or `/api/`) allows `/api` and `/api/x`, not `/apix`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote

from gateway.tools.hosts import shown

_MAX_DECODES = 4


class _Refused(ValueError):
    pass


def check_path(path: str, prefixes: tuple[str, ...]) -> str | None:
    """None when every reading of `path` is under one of `prefixes`, else why not."""
    try:
        for reading in _readings(path):
            normalised = _normalised(reading)
            if not _under(normalised, prefixes):
                return f"path {shown(normalised)} is not allowed"
    except _Refused as exc:
        return str(exc)
    return None


def _readings(path: str) -> Iterator[str]:
    seen: set[str] = set()
    current = path
    for _ in range(_MAX_DECODES + 1):
        for reading in (current, unicodedata.normalize("NFKC", current)):
            if reading not in seen:
                seen.add(reading)
                yield reading
        try:
            decoded = unquote(current, errors="strict")
        except UnicodeDecodeError:
            raise _Refused(f"path {shown(path)} has percent-encoding that is not UTF-8") from None
        if decoded == current:
            return
        current = decoded
    raise _Refused(f"path {shown(path)} is percent-encoded too many times")


def _normalised(path: str) -> str:
    """`path` without its `.` segments; refused when not absolute, with a `..` segment,
    a backslash or a control character."""
    if not path.startswith("/"):
        raise _Refused(f"path {shown(path)} is not absolute")
    if "\\" in path or any(ch < " " or ch == "\x7f" for ch in path):
        raise _Refused(f"path {shown(path)} contains backslashes or control characters")
    kept: list[str] = []
    for segment in path[1:].split("/"):
        dots = segment.split(";", 1)[0]
        if dots == "..":
            raise _Refused(f"path {shown(path)} contains a '..' segment")
        if dots != ".":
            kept.append(segment)
    return "/" + "/".join(kept)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    for prefix in prefixes:
        stem = prefix.rstrip("/")
        if path == stem or path.startswith(stem + "/") or (not stem and prefix):
            return True
    return False
