"""Hypothesis strategies for entities of every variable-length kind, in the shapes they take
in real text: e-mail addresses with several domain labels and hyphens, URLs carrying them,
JWTs, phone numbers in national and international formats, IBANs (valid and not), and
credentials. Each strategy draws (kind, value); `in_prose` puts one between the characters
that follow and precede entities in prose, JSON and code."""

from __future__ import annotations

import base64
import string

from hypothesis import strategies as st

_LOWER_DIGITS = string.ascii_lowercase + string.digits
_ALNUM = string.ascii_letters + string.digits
_B64URL = _ALNUM + "-_"


def _label() -> st.SearchStrategy[str]:
    """A domain label: letters and digits, hyphens inside only."""
    part = st.text(_LOWER_DIGITS, min_size=1, max_size=6)
    return st.lists(part, min_size=1, max_size=3).map("-".join)


@st.composite
def emails(draw: st.DrawFn) -> tuple[str, str]:
    local = draw(st.text(_LOWER_DIGITS, min_size=1, max_size=8))
    if draw(st.booleans()):
        local += draw(st.sampled_from(".+_-")) + draw(st.text(_LOWER_DIGITS, min_size=1, max_size=6))
    labels = draw(st.lists(_label(), min_size=1, max_size=4))
    tld = draw(st.text(string.ascii_lowercase, min_size=2, max_size=6))
    return "EMAIL", f"{local}@{'.'.join(labels)}.{tld}"


@st.composite
def urls_with_emails(draw: st.DrawFn) -> tuple[str, str, str]:
    """A URL whose query names an address: the address is what is found."""
    _, email = draw(emails())
    host = ".".join(draw(st.lists(_label(), min_size=1, max_size=3))) + ".com"
    return "EMAIL", email, f"https://{host}/u?email={email}"


_JWT_HEADERS = (
    base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("="),
    base64.urlsafe_b64encode(b'{"alg":"RS256","kid":"k1"}').decode().rstrip("="),
)


@st.composite
def jwts(draw: st.DrawFn) -> tuple[str, str]:
    claims = draw(st.text(_B64URL, min_size=8, max_size=40))
    signature = draw(st.text(_B64URL, min_size=0, max_size=43))
    return "JWT", f"{draw(st.sampled_from(_JWT_HEADERS))}.eyJ{claims}.{signature}"


def _digits(n: int) -> st.SearchStrategy[str]:
    return st.text(string.digits, min_size=n, max_size=n)


@st.composite
def phones(draw: st.DrawFn) -> tuple[str, str]:
    d = draw
    fmt = d(st.integers(0, 11))
    area = d(st.sampled_from("23456789")) + d(_digits(2))
    exchange = d(st.sampled_from("23456789")) + d(_digits(2))
    line = d(_digits(4))
    if fmt == 0:
        return "PHONE", f"{area}-{exchange}-{line}"
    if fmt == 1:
        return "PHONE", f"1-{area}-{exchange}-{line}"
    if fmt == 2:
        return "PHONE", f"+1 ({area}) {exchange}-{line}"
    if fmt == 3:
        return "PHONE", f"+1.{area}.{exchange}.{line}"
    if fmt == 4:  # UK London and mobile
        return "PHONE", d(
            st.sampled_from([f"020 7{d(_digits(3))} {line}", f"07{d(_digits(3))} {d(_digits(6))}"])
        )
    if fmt == 5:  # French
        pairs = " ".join(d(_digits(2)) for _ in range(4))
        return "PHONE", f"0{d(st.sampled_from('123456789'))} {pairs}"
    if fmt == 6:  # German with a slash, mobile with a space
        return "PHONE", d(st.sampled_from([f"030/{d(_digits(7))}", f"015{d(_digits(1))} {d(_digits(8))}"]))
    if fmt == 7:  # Indian national 5+5
        return "PHONE", f"0{d(st.sampled_from('6789'))}{d(_digits(3))} {d(_digits(5))}"
    if fmt == 8:  # E.164 with spaces
        return "PHONE", f"+44 20 {d(_digits(4))} {d(_digits(4))}"
    if fmt == 9:  # E.164 with dots
        return "PHONE", f"+33.6.{d(_digits(2))}.{d(_digits(2))}.{d(_digits(2))}.{d(_digits(2))}"
    if fmt == 10:  # E.164 with a parenthesised trunk
        return "PHONE", f"+44 (0)20 {d(_digits(4))} {d(_digits(4))}"
    return "PHONE", f"+91 9{d(_digits(4))} {d(_digits(5))}"


_IBAN_FORMATS = {"DE": "8n10n", "GB": "4a14n", "FR": "10n11c2n", "NL": "4a10n", "ES": "20n", "IT": "1a10n12c"}


def _iban_check(country: str, bban: str) -> str:
    number = int((bban + country + "00").translate({ord(c): str(int(c, 36)) for c in _ALNUM}))
    return f"{98 - number % 97:02d}"


@st.composite
def ibans(draw: st.DrawFn, valid: bool = True) -> tuple[str, str]:
    country = draw(st.sampled_from(sorted(_IBAN_FORMATS)))
    bban = ""
    for count, kind in _pairs(_IBAN_FORMATS[country]):
        alphabet = {
            "n": string.digits,
            "a": string.ascii_uppercase,
            "c": string.ascii_uppercase + string.digits,
        }
        bban += draw(st.text(alphabet[kind], min_size=count, max_size=count))
    check = _iban_check(country, bban)
    if not valid:
        check = f"{(int(check) + draw(st.integers(1, 96))) % 97:02d}"
    compact = country + check + bban
    spaced = " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))
    value = draw(st.sampled_from([compact, spaced]))
    return "IBAN", value.lower() if draw(st.integers(0, 4)) == 0 else value


def _pairs(layout: str) -> list[tuple[int, str]]:
    out, number = [], ""
    for char in layout:
        if char.isdigit():
            number += char
        else:
            out.append((int(number), char))
            number = ""
    return out


@st.composite
def credentials(draw: st.DrawFn) -> tuple[str, str]:
    def text(alphabet: str, n: int, m: int | None = None) -> str:
        return draw(st.text(alphabet, min_size=n, max_size=m or n))

    choice = draw(st.integers(0, 6))
    if choice == 0:
        return "GITHUB_TOKEN", "ghp_" + text(_ALNUM, 36)
    if choice == 1:
        return "OPENAI_API_KEY", "sk-proj-" + text(_B64URL, 20, 60)
    if choice == 2:
        return (
            "SLACK_TOKEN",
            f"xoxb-{text(string.digits, 10, 13)}-{text(string.digits, 10, 13)}-{text(_ALNUM, 24)}",
        )
    if choice == 3:
        return (
            "SLACK_TOKEN",
            f"xapp-1-A{text(_ALNUM.upper(), 10)}-{text(string.digits, 13)}-{text(_ALNUM, 64)}",
        )
    if choice == 4:
        return "AWS_ACCESS_KEY", "AKIA" + text(string.ascii_uppercase + "234567", 16)
    if choice == 5:
        return "CLOUDFLARE_API_TOKEN", "cfut_" + text(_ALNUM, 40, 44)
    return (
        "US_SSN",
        f"{draw(st.integers(1, 665)):03d}-{draw(st.integers(1, 99)):02d}-{draw(st.integers(1, 9999)):04d}",
    )


Shown = tuple[str, str, str]


def shown(strategy: st.SearchStrategy[tuple[str, str]]) -> st.SearchStrategy[Shown]:
    return strategy.map(lambda case: (case[0], case[1], case[1]))


def entities() -> st.SearchStrategy[Shown]:
    return st.one_of(
        *(shown(s) for s in (emails(), jwts(), phones(), ibans(), credentials())), urls_with_emails()
    )


_BEFORE = ["", " ", "\n", "(", '"', "'", ": ", "=", "<", "to ", "call ", "token "]
_AFTER = ["", " ", ".", ",", ";", ")", '"', "'", "!", "?", ". ", ".\n", "\n", ">", " ok", ". Next"]


@st.composite
def in_prose(draw: st.DrawFn, strategy: st.SearchStrategy[Shown]) -> Shown:
    """(kind, value, text): what shows the value between a typical prefix and suffix."""
    kind, value, showing = draw(strategy)
    text = draw(st.sampled_from(_BEFORE)) + showing + draw(st.sampled_from(_AFTER))
    return kind, value, text
