"""Destination checks: may a tool argument point at this URL, host or path?

A value containing "://" is a URL: its scheme must be allowed (compared case-blind), it
may carry no credentials (`user@host`), its port (if any) must be a number from 1 to
65535, its host must match the allowlist (`gateway.tools.hosts`) and its path the path
prefixes (`gateway.tools.url_paths`). Otherwise it is a bare host (`host` or
`host:port`) when the constraint lists hosts, and a path when it lists only path prefixes.

Any value with whitespace, a control or format character (zero-width joiners, bidi
marks) or a backslash is refused: URL parsers disagree about them.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import SplitResult, urlsplit

from gateway.policy.decision import ArgConstraint
from gateway.tools.hosts import check_host, shown
from gateway.tools.url_paths import check_path

_MAX_PORT = 65535
_UNSAFE_ASCII = re.compile(r"[\x00-\x20\\\x7f]")


class _BadAuthority(ValueError):
    pass


def check_destination(value: str, rule: ArgConstraint) -> str | None:
    """None when `value` is an allowed destination under `rule`, else why it is not."""
    if not value:
        return "is empty"
    if has_unsafe_chars(value):
        return "contains whitespace, control characters or backslashes"
    if "://" in value:
        return check_url(value, rule)
    if rule.allowed_hosts:
        return _check_bare_host(value, rule)
    if rule.allowed_path_prefixes:
        return check_path(value, rule.allowed_path_prefixes)
    return "no destination is allowed for this argument"


def check_url(value: str, rule: ArgConstraint) -> str | None:
    """None when the URL `value` is allowed under `rule`, else why it is not."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return "is not a valid URL"
    scheme = parts.scheme.lower()
    if scheme not in {s.lower() for s in rule.allowed_schemes}:
        return f"scheme {scheme!r} is not allowed"
    reason = _check_authority(parts, rule.allowed_hosts, rule.allow_private)
    if reason is not None:
        return reason
    return check_path(parts.path or "/", rule.allowed_path_prefixes) if rule.allowed_path_prefixes else None


def _check_bare_host(value: str, rule: ArgConstraint) -> str | None:
    try:
        parts = urlsplit("//" + value)
    except ValueError:
        return "is not a valid host (host or host:port)"
    if parts.path or parts.query or parts.fragment or "?" in value or "#" in value:
        return "is not a valid host (host or host:port)"
    return _check_authority(parts, rule.allowed_hosts)


def _check_authority(
    parts: SplitResult, patterns: tuple[str, ...], allow_private: bool = False
) -> str | None:
    if "@" in parts.netloc:
        return "destinations with credentials (user@host) are not allowed"
    try:
        host = _host_and_port(parts.netloc)
    except _BadAuthority as exc:
        return f"{shown(parts.netloc)} {exc}"
    if not host:
        return "has no host"
    return check_host(host, patterns, allow_private)


def _host_and_port(netloc: str) -> str:
    """The host of `netloc` (brackets removed); raises _BadAuthority on a malformed port."""
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise _BadAuthority("has an unclosed '['")
        host, rest = netloc[1:end], netloc[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _BadAuthority("has text after its IPv6 address")
        port = rest[1:] if rest else None
    elif netloc.count(":") > 1:
        raise _BadAuthority("is an IPv6 address without brackets, or has an invalid port")
    else:
        host, colon, port_text = netloc.partition(":")
        port = port_text if colon else None
    if port is not None and not (
        port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) <= _MAX_PORT
    ):
        raise _BadAuthority("has an invalid port (a number from 1 to 65535, or none)")
    return host


def has_unsafe_chars(value: str) -> bool:
    if _UNSAFE_ASCII.search(value):
        return True
    # Non-ASCII: control, format (zero-width, bidi), private-use, unassigned and separators.
    return not value.isascii() and any(
        unicodedata.category(ch)[0] in "CZ" for ch in value if not ch.isascii()
    )
