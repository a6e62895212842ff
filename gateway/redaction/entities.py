"""The kinds of sensitive data Tollgate knows, as regular expressions plus validators.

Each kind has one or more patterns (Python `re` syntax, no top-level alternation whose
choice could depend on text that has not arrived yet: see `window.py`) and an optional
validator. A named group `v` narrows what is replaced to the value itself, so that
"Bearer abc..." keeps its "Bearer ". Names are what policies and config use in
`entities`; the group names (`PII`, `SECRET`, `API_KEY`) select several at once.

Patterns are bounded on both sides by look-arounds of one or two characters, and no
pattern needs more than `LOOKAHEAD` characters after a match to decide it; the stream
window relies on that bound.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gateway.redaction import checks

LOOKAHEAD = 3
"""Characters after a match that can still change it (a separator, then a look-ahead)."""

NAME_PATTERN = r"[A-Z][A-Z0-9_]{0,39}"

NON_ASCII = r"\u0080-\U0010FFFF"
"""Every non-ASCII character, for use inside a character class (the prefilter sees them as "?")."""


@dataclass(frozen=True, slots=True)
class EntityKind:
    name: str  # EMAIL, CREDIT_CARD, ...: the marker is [NAME], the placeholder <NAME_n>
    patterns: tuple[str, ...]
    check: Callable[[str], bool] | None = None
    groups: frozenset[str] = frozenset()
    ignore_case: bool = False
    secret: bool = False  # a credential rather than personal data
    builtin: bool = False  # shipped and tested with Tollgate (custom kinds come from policy or config)
    # A match `check` rejects but this accepts is no entity, yet nothing inside it is one either.
    look_alike: Callable[[str], bool] | None = None


_B = r"(?<![A-Za-z0-9_])"  # not preceded by a word character
_E = r"(?![A-Za-z0-9_])"  # not followed by one
# A national number ends where no digit, letter or part-number suffix ("-A") follows.
_PHONE_END = r"(?![A-Za-z0-9_]|[./-][0-9]|-[A-Za-z])"
_PEM_BEGIN = r"-----BEGIN[A-Z0-9 ]{0,30}PRIVATE KEY-----"
_PEM_BODY = r"(?:\r?\n[A-Za-z0-9+/=]{1,128}|\r?\n[A-Za-z-]{1,32}: [^\r\n]{0,128}){0,256}"


def _iban_shapes() -> str:
    """An IBAN of its country's length, in groups of four or not, upper or lower case (the
    validator wants one of them throughout). Exactly that length, so that a word after it
    ("... 1332 from", "... 00 EUR") is never taken for its last group. The country code,
    read again by a look-behind, alone chooses the branch; both the prefilter (which drops
    the look-behind) and `regex` (which fails at the common start) scan it fast."""
    by_length: dict[int, list[str]] = {}
    for country, length in sorted(checks.IBAN_LENGTHS.items()):
        by_length.setdefault(length, []).append(country)
    branches = []
    for length, countries in sorted(by_length.items()):
        groups, rest = divmod(length - 4, 4)
        shape = f"(?<=(?i:{'|'.join(countries)})[0-9]{{2}})(?: ?[A-Za-z0-9]{{4}}){{{groups}}}"
        branches.append(shape + (f" ?[A-Za-z0-9]{{{rest}}}" if rest else ""))
    return "[A-Za-z]{2}[0-9]{2}(?:" + "|".join(branches) + ")"


_BUILTIN: tuple[EntityKind, ...] = (
    EntityKind(
        "PRIVATE_KEY",
        (
            # The whole block; and, when no END line follows, the key material alone. Two
            # patterns, not an optional END, so that a stream holds the block until it knows.
            _PEM_BEGIN + _PEM_BODY + r"\r?\n-----END[A-Z0-9 ]{0,30}PRIVATE KEY-----",
            _PEM_BEGIN + _PEM_BODY,
        ),
        groups=frozenset({"SECRET"}),
        secret=True,
    ),
    EntityKind(
        "JWT",
        (
            _B
            + r"eyJ[A-Za-z0-9_-]{8,8192}\.eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{0,2048}"
            # A full stop may end the sentence ("token <jwt>."), not a fourth segment.
            + r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9_-])",
        ),
        checks.jwt_valid,
        frozenset({"SECRET"}),
        secret=True,
    ),
    EntityKind(
        "AWS_ACCESS_KEY",
        (
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}(?![A-Za-z0-9])",
            # The secret that goes with it, where its name says what it is.
            r"(?<![A-Za-z0-9])(?i:aws[_-]?secret(?:[_-]?access)?[_-]?key|secret[_-]?access[_-]?key)"
            r"[\"']?[ \t]{0,3}[:=]"
            r"[ \t]{0,3}[\"']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ),
        check=checks.not_placeholder,
        groups=frozenset({"SECRET", "API_KEY"}),
        secret=True,
    ),
    EntityKind(
        "GITHUB_TOKEN",
        (_B + r"gh[pousr]_[A-Za-z0-9]{36,251}" + _E, _B + r"github_pat_[A-Za-z0-9_]{22,251}" + _E),
        check=checks.not_placeholder,
        groups=frozenset({"SECRET", "API_KEY"}),
        secret=True,
    ),
    EntityKind(
        "SLACK_TOKEN",
        (
            # Bot, user, app-level (xapp-), refresh (xoxe-) and configuration tokens.
            _B + r"(?:xoxe\.)?(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,250}" + r"(?![A-Za-z0-9-])",
            r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]{6,32}/B[A-Za-z0-9_]{6,32}/[A-Za-z0-9_]{16,64}",
        ),
        check=checks.not_placeholder,
        groups=frozenset({"SECRET", "API_KEY"}),
        secret=True,
    ),
    EntityKind(
        "OPENAI_API_KEY",
        (r"(?<![A-Za-z0-9_-])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,250}(?![A-Za-z0-9_-])",),
        check=checks.not_placeholder,
        groups=frozenset({"SECRET", "API_KEY"}),
        secret=True,
    ),
    EntityKind(
        "CLOUDFLARE_API_TOKEN",
        (
            # The scannable format: cfk_ / cfut_ / cfat_, 40 characters and a checksum.
            _B + r"cf(?:k|ut|at)_[A-Za-z0-9]{40,60}" + _E,
            # Older tokens have no prefix: only next to a name that says what they are.
            r"(?i:cloudflare|cf)[A-Za-z0-9_.-]{0,24}(?i:token|key)[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
            r"(?P<v>[A-Za-z0-9_-]{40})(?![A-Za-z0-9_-])",
        ),
        check=checks.not_placeholder,
        groups=frozenset({"SECRET", "API_KEY"}),
        secret=True,
    ),
    EntityKind(
        "BEARER_TOKEN",
        (
            r"(?<![A-Za-z0-9])(?i:bearer)[ \t]{1,3}"
            r"(?P<v>[A-Za-z0-9._~+/-]{16,8192}={0,2})(?![A-Za-z0-9._~+/=-])",
            # OAuth token responses and callbacks: {"access_token": "ya29...."}, refresh_token=...
            # (opaque values; a longer one is a JWT, found as such)
            r"(?<![A-Za-z0-9])(?i:access|refresh|id|auth)[_-]?(?i:token)[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
            r"(?P<v>[A-Za-z0-9._~+/-]{16,2048}={0,2})(?![A-Za-z0-9._~+/=-])",
        ),
        checks.not_placeholder,
        frozenset({"SECRET"}),
        secret=True,
    ),
    EntityKind(
        "EMAIL",
        (
            # The local part may be internationalised (RFC 6531); the domain is ASCII (punycode).
            r"(?<![A-Za-z0-9._%+\-" + NON_ASCII + r"])[A-Za-z0-9._%+\-" + NON_ASCII + r"]{1,64}@"
            r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}(?![A-Za-z0-9_-])",
        ),
        groups=frozenset({"PII"}),
    ),
    EntityKind(
        "CREDIT_CARD",
        (r"(?<![0-9-])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])",),
        checks.card_number_valid,
        frozenset({"PII"}),
    ),
    EntityKind(
        "IBAN",
        (r"(?<![A-Za-z0-9])" + _iban_shapes() + r"(?![A-Za-z0-9])",),
        checks.iban_valid,
        frozenset({"PII"}),
        look_alike=checks.iban_shaped,
    ),
    EntityKind(
        "US_SSN",
        (
            r"(?<![0-9-])[0-9]{3}-[0-9]{2}-[0-9]{4}(?![0-9-])",
            r"(?<![0-9+.-])[0-9]{3} [0-9]{2} [0-9]{4}(?![A-Za-z0-9_]|[ .-][0-9])",
            # Nine bare digits only where a name says what they are: ssn=123456789, "SSN": "...".
            r"(?<![A-Za-z0-9])(?i:ssn|social[ _-]?security(?:[ _-]?(?:number|no\.?))?)[\"']?[ \t]{0,3}"
            r"[:=#]{0,2}[ \t]{0,3}[\"']?(?P<v>[0-9]{9})(?![0-9])",
        ),
        checks.ssn_valid,
        frozenset({"PII"}),
    ),
    EntityKind(
        "PHONE",
        (
            # E.164, with or without separators: +14155552671, +44 20 7946 0958, +1 (415) 555-2671;
            # (+44) 20 7946 0958, 0044 20 7946 0958 (the 00 prefix only before a separator)
            r"(?<![A-Za-z0-9+])(?:\+[1-9][0-9]{0,2}|\(\+[1-9][0-9]{0,2}\)|00[1-9][0-9]{0,2}(?=[ .-]))"
            r"(?:[ .-]?(?:\([0-9]{1,4}\)|[0-9])){6,14}(?![0-9])",
            # North American: (415) 555-2671, 415-555-2671, 415.555.2671, 1-415-555-2671
            r"(?<![A-Za-z0-9+.-])(?:1[ .-])?(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .-])"
            r"[2-9][0-9]{2}[ .-][0-9]{4}" + _PHONE_END,
            # National with a trunk 0: 020 7946 0958, 01 23 45 67 89, 030 12345678, 07700 900123,
            # 0151 23456789, 09876 54321, (030) 1234567, (02) 9876 5432
            r"(?<![A-Za-z0-9+.-])(?:0[1-9][0-9]{0,3}|\(0[1-9][0-9]{0,3}\))(?:[ .-][0-9]{2,8}){1,4}"
            + _PHONE_END,
            # German, the area code before a slash: 030/1234567, 0221/123 4567, 030 / 1234567
            r"(?<![A-Za-z0-9+./-])0[1-9][0-9]{1,4} ?/ ?[0-9]{3,9}(?:[ -][0-9]{2,8}){0,3}" + _PHONE_END,
        ),
        checks.phone_valid,
        frozenset({"PII"}),
    ),
    EntityKind(
        "IP_ADDRESS",
        (
            r"(?<![A-Za-z0-9.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![A-Za-z0-9]|\.[0-9])",
            # IPv6: all eight groups, or compressed with "::" (possibly ending in dotted IPv4).
            r"(?<![A-Za-z0-9:.])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![A-Za-z0-9:]|\.[0-9])",
            r"(?<![A-Za-z0-9:.])(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,6})?::"
            r"(?:(?:[0-9A-Fa-f]{1,4}:){0,5}(?:(?:[0-9]{1,3}\.){3}[0-9]{1,3}|[0-9A-Fa-f]{1,4}))?"
            r"(?![A-Za-z0-9:]|\.[0-9])",
        ),
        checks.ip_address_valid,
        frozenset({"PII"}),
    ),
)

BUILTIN = tuple(dataclasses.replace(kind, builtin=True) for kind in _BUILTIN)
BUILTIN_NAMES = frozenset(kind.name for kind in BUILTIN)
GROUPS: Mapping[str, frozenset[str]] = {
    group: frozenset(kind.name for kind in BUILTIN if group in kind.groups)
    for group in ("PII", "SECRET", "API_KEY")
}


def custom_pattern(name: str, pattern: str) -> EntityKind:
    """A kind from policy data or config: one regular expression, no validator."""
    re.compile(pattern)  # raises re.error, reported by config validation with the name
    return EntityKind(name, (pattern,), secret=True)


def literal_terms(name: str, terms: Sequence[str]) -> EntityKind:
    """A kind matching any of `terms` as a whole word, ignoring case."""
    alternatives = "|".join(re.escape(term) for term in sorted(set(terms), key=len, reverse=True) if term)
    return EntityKind(name, (r"(?<!\w)(?:" + alternatives + r")(?!\w)",), ignore_case=True, secret=True)


def select(names: Iterable[str], available: Iterable[EntityKind]) -> tuple[EntityKind, ...]:
    """The kinds that `names` (kind or group names, or ALL) select; empty selects all."""
    kinds = tuple(available)
    wanted = set(names)
    if not wanted or "ALL" in wanted:
        return kinds
    expanded = set(wanted)
    for group, members in GROUPS.items():
        if group in wanted:
            expanded |= members
    return tuple(kind for kind in kinds if kind.name in expanded)


KNOWN = BUILTIN_NAMES | GROUPS.keys() | {"ALL"}
"""Every name `entities` may use without defining it."""
