"""Destination checks: may a tool argument point at this URL, host or path?

A value containing "://" is a URL: its scheme must be allowed, it may carry no
credentials (`user@host`), its host must match the allowlist and its path the path
prefixes. Otherwise it is a bare host (`host` or `host:port`) when the constraint lists
hosts, and a path when it lists only path prefixes.

Whatever the allowlist says, addresses that are not public are refused: private,
loopback, link-local, unspecified, multicast and reserved ranges, including IPv4
written as one integer (`2130706433`), in hex or octal (`0x7f.1`, `0177.0.0.1`), in short
form (`127.1`), or inside IPv6 (`::ffff:127.0.0.1`, 6to4, Teredo, NAT64), and the names
`localhost` and `*.localhost`. Hosts are compared by name: a name that resolves to a
private address is the allowlist's business, because resolving here would both block
and race the tool's own lookup.

Host patterns: an exact host, `*.example.com` for any subdomain of example.com (not
example.com itself), or `*` for any public host. Path prefixes match whole segments:
`/api` (or `/api/`) allows `/api` and `/api/x`, not `/apix`; percent-encoding is decoded first and any
`.` or `..` segment is refused.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, unquote, urlsplit

from gateway.policy.decision import ArgConstraint

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SHOWN = 80  # characters of an offending value quoted back in a reason


class InvalidHost(ValueError):
    pass


def check_destination(value: str, rule: ArgConstraint) -> str | None:
    """None when `value` is an allowed destination under `rule`, else why it is not."""
    if any(ch <= " " or ch in "\\\x7f" for ch in value):
        return "contains whitespace, control characters or backslashes"
    if "://" in value:
        return _check_url(value, rule)
    if rule.allowed_hosts:
        return _check_bare_host(value, rule)
    if rule.allowed_path_prefixes:
        return _check_path(value, rule.allowed_path_prefixes)
    return "no destination is allowed for this argument"


def _check_url(value: str, rule: ArgConstraint) -> str | None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError on a malformed port)
    except ValueError:
        return f"{_shown(value)} is not a valid URL"
    scheme = parts.scheme.lower()
    if scheme not in {s.lower() for s in rule.allowed_schemes}:
        return f"scheme {scheme!r} is not allowed"
    reason = _check_netloc(parts, rule.allowed_hosts)
    if reason is not None:
        return reason
    return _check_path(parts.path or "/", rule.allowed_path_prefixes) if rule.allowed_path_prefixes else None


def _check_bare_host(value: str, rule: ArgConstraint) -> str | None:
    try:
        parts = urlsplit("//" + value)
        parts.port  # noqa: B018
    except ValueError:
        return f"{_shown(value)} is not a valid host"
    if parts.path or parts.query or parts.fragment or "?" in value or "#" in value:
        return f"{_shown(value)} is not a valid host"
    return _check_netloc(parts, rule.allowed_hosts)


def _check_netloc(parts: SplitResult, patterns: tuple[str, ...]) -> str | None:
    if "@" in parts.netloc:
        return "destinations with credentials (user@host) are not allowed"
    host = parts.hostname
    if not host:
        return "has no host"
    return check_host(host, patterns)


def check_host(host: str, patterns: tuple[str, ...]) -> str | None:
    """None when `host` (a name or an IP literal, without brackets) matches `patterns` and is public."""
    try:
        name, ip = _normalise(host)
    except InvalidHost:
        return f"host {_shown(host)} is not a valid host name"
    if ip is not None:
        if not _is_public(ip):
            return f"address {ip} is not public"
        return None if any(_ip_matches(ip, p) for p in patterns) else f"host {str(ip)!r} is not allowed"
    if name == "localhost" or name.endswith(".localhost"):
        return f"host {name!r} is local"
    return None if any(_name_matches(name, p) for p in patterns) else f"host {_shown(name)} is not allowed"


def _normalise(host: str) -> tuple[str, IPAddress | None]:
    """The host as a lower-case ASCII name without its trailing dot, and its address if it is one."""
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if ":" in host:
        try:
            return host, ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidHost(host) from None
    ip = _ipv4(host)
    if ip is not None:
        return str(ip), ip
    try:
        name = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise InvalidHost(host) from None
    if not name or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise InvalidHost(host)
    return name, None


def _ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address a host in any IPv4 notation a URL parser accepts denotes (WHATWG rules):
    a host whose last label is a number is an address, or invalid."""
    labels = host.split(".")
    if _ipv4_number(labels[-1]) is None:
        return None
    numbers = [_ipv4_number(label) for label in labels]
    if len(labels) > 4 or any(n is None for n in numbers):
        raise InvalidHost(host)
    values = [n for n in numbers if n is not None]
    *leading, last = values
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(values)):
        raise InvalidHost(host)
    address = last
    for i, n in enumerate(leading):
        address += n << (8 * (3 - i))
    return ipaddress.IPv4Address(address)


def _ipv4_number(label: str) -> int | None:
    if label[:2] in ("0x", "0X"):
        digits, base = label[2:], 16
    elif len(label) > 1 and label.startswith("0"):
        digits, base = label[1:], 8
    else:
        digits, base = label, 10
    if not digits:
        return 0 if base != 10 else None
    if not all(ch in "0123456789abcdef"[:base] for ch in digits.lower()):
        return None
    return int(digits, base)


def _is_public(ip: IPAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if any(v4 is not None and not _is_public(v4) for v4 in embedded):
            return False
    return ip.is_global and not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or ip.is_reserved
    )


def _ip_matches(ip: IPAddress, pattern: str) -> bool:
    if pattern == "*":
        return True
    try:
        return ipaddress.ip_address(pattern.strip("[]")) == ip
    except ValueError:
        return False


def _name_matches(name: str, pattern: str) -> bool:
    pattern = pattern.lower().rstrip(".")
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern


def _check_path(path: str, prefixes: tuple[str, ...]) -> str | None:
    decoded = unquote(path)
    if not decoded.startswith("/"):
        return f"path {_shown(decoded)} is not absolute"
    if any(segment in (".", "..") for segment in decoded.split("/")) or "\\" in decoded or "\x00" in decoded:
        return f"path {_shown(decoded)} contains '.' or '..' segments"
    for prefix in prefixes:
        stem = prefix.rstrip("/")
        if decoded == stem or decoded.startswith(stem + "/") or (not stem and prefix):
            return None
    return f"path {_shown(decoded)} is not allowed"


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")
