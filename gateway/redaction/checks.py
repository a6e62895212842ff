"""Validators that tell a real entity from a look-alike: checksums where the format has one
(Luhn for card numbers, mod-97 for IBANs), structural rules where it does not."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import string

import orjson

# Length of an IBAN per country (ISO 13616 registry); a code not listed is not an IBAN.
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


_NOT_DIGITS = re.compile(r"[^0-9]+")
_NON_DIGIT_BYTES = bytes(b for b in range(128) if not 0x30 <= b <= 0x39)
_DOUBLED = bytes.maketrans(b"0123456789", bytes((0, 2, 4, 6, 8, 1, 3, 5, 7, 9)))
# Letters as the numbers mod-97 uses (A = 10 ... Z = 35); digits stay as they are.
_IBAN_LETTERS = {ord(c): str(int(c, 36)) for c in string.ascii_letters}


def digits_of(text: str) -> str:
    if text.isascii():  # every candidate: the patterns are ASCII
        return text.encode("ascii").translate(None, _NON_DIGIT_BYTES).decode("ascii")
    return _NOT_DIGITS.sub("", text)


def luhn_valid(number: str) -> bool:
    if number.isascii() and number.isdigit():
        # Bytes "0".."9" are 48..57: the digits kept as they are, from the right, add up to
        # their bytes' sum less 48 each; the others are doubled (digit sum) by the table.
        data = number.encode("ascii")
        kept = data[-1::-2]
        total = sum(kept) - 48 * len(kept) + sum(data[-2::-2].translate(_DOUBLED))
        return total % 10 == 0
    return _luhn_valid_slow(number)


def _luhn_valid_slow(number: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(number)):
        digit = ord(char) - 48
        if position % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def _card_issuer_known(number: str) -> bool:
    """Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro: the issuer ranges
    in use, so that a Luhn-valid order number (one in ten is) is not taken for a card.
    `number` is ASCII digits, so prefixes of one length compare as their numbers do."""
    length = len(number)
    two, three, four = number[:2], number[:3], number[:4]
    if number[0] == "4":
        return length in (13, 16, 19)
    if "51" <= two <= "55" or "2221" <= four <= "2720":
        return length == 16
    if two in ("34", "37"):
        return length == 15
    if four == "6011" or two == "65" or "644" <= three <= "649" or "622126" <= number[:6] <= "622925":
        return 16 <= length <= 19
    if "3528" <= four <= "3589":
        return 16 <= length <= 19
    if two in ("36", "38", "39") or "300" <= three <= "305":
        return 14 <= length <= 19
    if two in ("62", "50", "56", "57", "58") or number[0] == "6":
        return 16 <= length <= 19
    return False


def card_number_valid(text: str) -> bool:
    if " " in text and "-" in text:  # "4111 1111-1111 1111" is not how anyone writes a card number
        return False
    number = digits_of(text)
    if not 13 <= len(number) <= 19:
        return False
    return _card_issuer_known(number) and luhn_valid(number)


def iban_valid(text: str) -> bool:
    compact = _iban_compact(text)
    if compact is None:
        return False
    rearranged = compact[4:] + compact[:4]
    if rearranged.isascii() and rearranged.isalnum():
        return int(rearranged.translate(_IBAN_LETTERS)) % 97 == 1
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def iban_shaped(text: str) -> bool:
    """A known country and its length, one case throughout: an IBAN, or one mistyped. Nothing
    inside it is taken for another kind (its digits for a phone or card number)."""
    return _iban_compact(text) is not None


def _iban_compact(text: str) -> str | None:
    """`text` without spaces, upper-cased, when it has an IBAN's country and length."""
    compact = text.replace(" ", "")
    if not (compact.isupper() or compact.islower()):
        return None  # "De89..." or "dE89...": no one writes an IBAN so
    compact = compact.upper()
    return compact if IBAN_LENGTHS.get(compact[:2]) == len(compact) else None


def ssn_valid(text: str) -> bool:
    number = digits_of(text)
    area, group, serial = number[:3], number[3:5], number[5:]
    return (
        len(number) == 9
        and area not in ("000", "666")
        and area[0] != "9"
        and group != "00"
        and serial != "0000"
    )


def phone_valid(text: str) -> bool:
    count = len(digits_of(text))
    if text.startswith(("+", "(+")):
        return 8 <= count <= 15  # E.164: country code and subscriber number, 15 digits at most
    if text.startswith("00"):
        # After the international prefix 00; 13 or more, as a zero-padded number rarely has.
        return 13 <= count <= 17
    if text.startswith(("0", "(0")):
        return 10 <= count <= 12  # a trunk 0 and up to 11 more (German mobiles: 0151 23456789)
    return 10 <= count <= 11  # North American, with or without the leading 1


_IPV4_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = re.compile(rf"{_IPV4_OCTET}(?:\.{_IPV4_OCTET}){{3}}", re.ASCII)


def ipv4_valid(text: str) -> bool:
    """What `ipaddress.IPv4Address` accepts (four decimal octets up to 255, no leading zero),
    in one match rather than an object built for every dotted number."""
    return _IPV4.fullmatch(text) is not None


def ipv6_valid(text: str) -> bool:
    # "a::b" or "::1" in code and prose is rarely an address; require some substance.
    if len(text) < 6 or text.count(":") < 2:
        return False
    if "/" in text or "%" in text or not text.isascii():
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return False
        return True
    return _ipv6_parses(text)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _ipv6_parses(text: str) -> bool:
    """What `ipaddress.IPv6Address` accepts for ASCII text without "/" or "%": its rules, step
    by step (`_BaseV6._ip_int_from_string`), without building one."""
    parts = text.split(":")
    if len(parts) < 3:
        return False
    if "." in parts[-1]:  # a trailing IPv4 address stands for the last two groups
        if not ipv4_valid(parts.pop()):
            return False
        parts += ("0", "0")
    if len(parts) > 9:
        return False
    skip: int | None = None  # where "::" is
    for index in range(1, len(parts) - 1):
        if not parts[index]:
            if skip is not None:
                return False  # at most one "::"
            skip = index
    if skip is not None:
        high, low = skip, len(parts) - skip - 1  # groups before and after the "::"
        if not parts[0]:
            high -= 1
            if high:
                return False  # a leading ":" only as part of "::"
        if not parts[-1]:
            low -= 1
            if low:
                return False  # a trailing ":" likewise
        if high + low > 7:
            return False  # "::" stands for one group at least
    elif len(parts) != 8 or not parts[0] or not parts[-1]:
        return False
    else:
        high, low = 8, 0
    groups = parts[:high] + parts[len(parts) - low :]
    return all(0 < len(group) <= 4 and _HEX_DIGITS.issuperset(group) for group in groups)


def jwt_valid(text: str) -> bool:
    header = text.split(".", 1)[0]
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(decoded, dict) and ("alg" in decoded or "typ" in decoded)


def ip_address_valid(text: str) -> bool:
    return ipv6_valid(text) if ":" in text else ipv4_valid(text)


# Whole words (between "-", "_" or ".") that templates and docs put where a credential goes.
_PLACEHOLDER_WORDS = frozenset(
    {
        "your", "yours", "here", "placeholder", "replace", "insert", "changeme", "redacted",
        "dummy", "fake", "sample", "todo", "tbd", "fixme", "example",
    }
)  # fmt: skip
# Two or more of these between separators: "my-api-token", "bot_token_value".
_TOKEN_WORDS = frozenset(
    {
        "my", "the", "token", "key", "secret", "api", "bot", "user", "app", "access", "auth",
        "value", "id", "password", "goes",
    }
)  # fmt: skip
_WORD_SEPARATORS = re.compile(r"[-_.]+")
_FILLER = re.compile(r"[xX]{6}|[.]{3}")


def not_placeholder(value: str) -> bool:
    """False for what stands in for a credential: `xoxb-your-bot-token-here`,
    `YOUR_API_KEY_HERE`, `sk-xxxxxxxxxxxxxxxxxxxx`, `ghp_****...`; a real one is random.
    A random value has a run of six x's, x's for half its characters, or a whole word of the
    template vocabulary between separators, far too rarely to lose a real credential to this."""
    if _FILLER.search(value):
        return False
    if (value.count("x") + value.count("X")) * 2 >= sum(char.isalnum() for char in value):
        return False  # mostly x's between separators: xoxb-xxxx-xxxx-xxxx
    words = [word.lower() for word in _WORD_SEPARATORS.split(value)]
    if any(word in _PLACEHOLDER_WORDS for word in words):
        return False
    return sum(word in _TOKEN_WORDS for word in words) < 2
