"""Hosts of outbound destinations: may a tool argument or an image URL name this host?

Addresses that are not public are refused whatever the allowlist says: private, loopback,
link-local, unspecified, multicast and reserved ranges, including IPv4 written as one
integer (`2130706433`), in hex or octal (`0x7f.1`, `0177.0.0.1`), in short form
(`127.1`), or inside IPv6 (`::ffff:127.0.0.1`, 6to4, Teredo, NAT64), and the names
`localhost` and `*.localhost`. Hosts are compared by name: a name that resolves to a
private address is the allowlist's business, because resolving here would both block
and race the tool's own lookup.

Names are compared in their ASCII (punycode) form, lower-case, without a trailing dot.
A non-ASCII name must survive the trip to punycode and back unchanged: characters that
IDNA versions map differently (`ß`, `ς`, joiners, fullwidth letters) would let the
gateway check one host while the fetcher goes to another, so they are refused.

Patterns: an exact host, `*.example.com` for any subdomain of example.com (not
example.com itself), or `*` for any public host.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SHOWN = 80  # characters of an offending value quoted back in a reason
_MAX_IPV4_DIGITS = 32  # more than 2**32 needs in any base


class InvalidHost(ValueError):
    pass


def check_host(host: str, patterns: tuple[str, ...], allow_private: bool = False) -> str | None:
    """None when `host` (a name or an IP literal, without brackets) matches `patterns` and is
    public; with `allow_private`, an address that is not public (or a local name) passes too
    when a pattern other than "*" names it."""
    try:
        name, ip = _normalise(host)
    except InvalidHost:
        return f"host {shown(host)} is not a valid host name"
    named = tuple(p for p in patterns if p != "*") if allow_private else ()
    if ip is not None:
        if not _is_public(ip):
            return None if any(_ip_matches(ip, p) for p in named) else f"address {ip} is not public"
        return None if any(_ip_matches(ip, p) for p in patterns) else f"host {str(ip)!r} is not allowed"
    if name == "localhost" or name.endswith(".localhost"):
        return None if any(_name_matches(name, p) for p in named) else f"host {name!r} is local"
    return None if any(_name_matches(name, p) for p in patterns) else f"host {shown(name)} is not allowed"


def shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


def _normalise(host: str) -> tuple[str, IPAddress | None]:
    """The host as a lower-case ASCII name without its trailing dot, and its address if it is one."""
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if ":" in host:
        if "%" in host:  # an IPv6 zone id names an interface of the machine that fetches
            raise InvalidHost(host)
        try:
            return host, ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidHost(host) from None
    name = _ascii_name(host)
    ip = _ipv4(name)
    if ip is not None:
        return str(ip), ip
    if not name or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise InvalidHost(host)
    return name, None


def _ascii_name(host: str) -> str:
    if host.isascii():
        return host
    try:
        name = host.encode("idna").decode("ascii")
        back = name.encode("ascii").decode("idna")
    except UnicodeError:
        raise InvalidHost(host) from None
    if back != unicodedata.normalize("NFC", host):
        raise InvalidHost(host)
    return name


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
    if len(digits.lstrip("0")) > _MAX_IPV4_DIGITS:
        return 1 << 32  # a number, too large for any address (and for int() to parse quickly)
    return int(digits, base)


def is_public_address(address: str) -> bool:
    """Whether an address a name resolved to (`"203.0.113.7"`, `"fe80::1%eth0"`) is public, by
    the same ranges as an address written in a URL; anything unparsable is not."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    return _is_public(ip)


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
    wildcard = pattern.startswith("*.")
    try:
        pattern = _ascii_name(pattern[2:] if wildcard else pattern)
    except InvalidHost:
        return False
    if wildcard:
        return name.endswith("." + pattern)
    return name == pattern
