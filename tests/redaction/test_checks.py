"""The validators' fast paths against what they replace: `ipaddress` for addresses, and the
plain textbook forms of Luhn, mod-97 and the card issuer ranges."""

from __future__ import annotations

import ipaddress
import random
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.redaction import checks


def _ipv4_reference(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _ipv6_reference(text: str) -> bool:
    if len(text) < 6 or text.count(":") < 2:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _luhn_reference(number: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(number)):
        digit = int(char)
        if position % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _iban_reference(text: str) -> bool:
    compact = text.replace(" ", "")
    if checks.IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _issuer_reference(number: str) -> bool:
    length, two, three, four = len(number), int(number[:2]), int(number[:3]), int(number[:4])
    if number[0] == "4":
        return length in (13, 16, 19)
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return length == 16
    if two in (34, 37):
        return length == 15
    if number.startswith(("6011", "65")) or 644 <= three <= 649 or 622126 <= int(number[:6]) <= 622925:
        return 16 <= length <= 19
    if 3528 <= four <= 3589:
        return 16 <= length <= 19
    if two in (36, 38, 39) or 300 <= three <= 305:
        return 14 <= length <= 19
    if two == 62 or two in (50, 56, 57, 58) or number[0] == "6":
        return 16 <= length <= 19
    return False


_OCTETS = ["0", "1", "9", "10", "99", "100", "199", "200", "249", "250", "255", "256", "260", "300"]
_OCTETS += ["999", "00", "01", "010", "1000", "", "٣", "1\n", " 1", "+1", "0x1"]


def test_ipv4_is_what_ipaddress_accepts() -> None:
    rnd = random.Random(4)
    for number in range(1000):
        for text in (f"{number}.1.2.3", f"{number:03d}.1.2.3", f"1.2.3.{number:02d}"):
            assert checks.ipv4_valid(text) == _ipv4_reference(text), text
    for _ in range(20_000):
        text = ".".join(rnd.choice(_OCTETS) for _ in range(rnd.choice((3, 4, 4, 4, 5))))
        assert checks.ipv4_valid(text) == _ipv4_reference(text), text


_HEXTETS = ["", "0", "1", "ff", "abcd", "ABCD", "12345", "g", "db8", "00000", "1.2.3.4", "01.2.3.4"]
_HEXTETS += ["255.255.255.255", "1.2.3", "256.1.1.1", "a.b", "1/2", "1%e", "٣"]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_HEXTETS), min_size=1, max_size=11))
def test_ipv6_is_what_ipaddress_accepts(parts: list[str]) -> None:
    text = ":".join(parts)
    assert checks.ipv6_valid(text) == _ipv6_reference(text)


def test_ipv6_addresses_and_their_near_misses() -> None:
    rnd = random.Random(6)
    for _ in range(20_000):
        address = ipaddress.IPv6Address(rnd.getrandbits(128) & rnd.choice((2**128 - 1, 2**32 - 1, 2**64 - 1)))
        text = rnd.choice((address.compressed, address.exploded, "::ffff:" + str(address)[-9:]))
        if rnd.random() < 0.6:  # one character inserted, removed or replaced
            at, char = rnd.randrange(len(text) + 1), rnd.choice("0a:.:9fG")
            text = rnd.choice(
                (text[:at] + char + text[at:], text[:at] + text[at + 1 :], text[:at] + char + text[at + 1 :])
            )
        assert checks.ipv6_valid(text) == _ipv6_reference(text), text


def test_card_numbers_luhn_and_issuers() -> None:
    rnd = random.Random(8)
    prefixes = "4 5 51 55 56 2221 2720 2721 34 37 6011 65 644 649 650 622126 622925 622125 3528 3589 36 38 39"
    prefixes += " 300 305 306 62 50 6 1 0 7 8 9"
    for _ in range(20_000):
        number = rnd.choice(prefixes.split()) + "".join(
            rnd.choice("0123456789") for _ in range(rnd.randint(8, 17))
        )
        assert checks.luhn_valid(number) == _luhn_reference(number), number
        if len(number) >= 6:
            assert checks._card_issuer_known(number) == _issuer_reference(number), number
        spaced = " ".join(number[i : i + 4] for i in range(0, len(number), 4))
        expected = 13 <= len(number) <= 19 and _issuer_reference(number) and _luhn_reference(number)
        assert checks.card_number_valid(spaced) == expected, spaced
        assert checks.card_number_valid(spaced.replace(" ", "-", 1)) is (expected and " " not in spaced[5:])


def test_iban_mod_97() -> None:
    rnd = random.Random(9)
    for _ in range(20_000):
        country = rnd.choice(sorted(checks.IBAN_LENGTHS))
        rest = "".join(rnd.choice("0123456789ABCDEFXYZ") for _ in range(checks.IBAN_LENGTHS[country] - 4))
        text = f"{country}{rnd.randrange(100):02d}{rest}"
        assert checks.iban_valid(text) == _iban_reference(text), text


def test_digits_of() -> None:
    rnd = random.Random(10)
    for _ in range(20_000):
        text = "".join(rnd.choice("0123 -()+.a٣é\x7f") for _ in range(rnd.randint(0, 20)))
        assert checks.digits_of(text) == re.sub(r"[^0-9]+", "", text)


def test_random_credentials_are_never_taken_for_placeholders() -> None:
    rnd = random.Random(11)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for _ in range(20_000):
        # base64url segments, some joined by dots (ya29.a0Af..., JWT-like bearer values)
        segments = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(8, 60))) for _ in range(3)]
        value = ".".join(segments[: rnd.randint(1, 3)])
        assert checks.not_placeholder(value), value


def test_template_placeholders_are_recognised() -> None:
    for value in [
        "xoxb-your-bot-token-here",
        "YOUR_API_KEY_HERE",
        "sk-xxxxxxxxxxxxxxxxxxxxxxxx",
        "xoxb-xxxx-xxxx-xxxx",
        "my-api-token",
        "sk-proj-REPLACE_ME",
        "abc...xyz0123456789",
    ]:
        assert not checks.not_placeholder(value), value
