"""The characters a pattern's matches begin with, which a stream's scan uses to skip the
patterns that cannot begin anywhere in its text: the set must hold every match's first
character (else an entity would go out unmasked), and a stream must mask exactly as the
whole text does when an entity's first character arrives alone, after plain text the scan
skipped most patterns on."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN, EntityKind
from gateway.redaction.first_chars import first_chars, read_chars
from gateway.redaction.scrub import marker
from gateway.redaction.window import SlidingWindow, redact_whole
from tests.redaction.corpus import NEAR_MISSES, NEGATIVES, POSITIVES

DETECTOR = Catalog(BUILTIN).detector()
_TEXTS = [
    *(text for cases in POSITIVES.values() for text, _ in cases),
    *(text for texts in NEAR_MISSES.values() for text in texts),
    *NEGATIVES,
]


@pytest.mark.parametrize(
    ("pattern", "ignore_case", "expected"),
    [
        (r"sk-[a-z]{4}", False, "s"),
        (r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z]{16}", False, "A"),
        (r"(?i:bearer)\s+\w+", False, "bB"),
        (r"ab+", True, "aA"),
        (r"[0-9]{3}-[0-9]{2}", False, "0123456789"),
        (r"\+?[1-3]\d", False, "+123"),
        (r"(?:x|y)?z", False, "xyz"),
    ],
)
def test_the_first_characters_of_a_pattern(pattern: str, ignore_case: bool, expected: str) -> None:
    assert first_chars(pattern, ignore_case) == frozenset(expected)


def test_a_negated_class_leaves_every_other_ascii_character() -> None:
    chars = first_chars(r"[^a-z]x", False)
    assert chars is not None
    assert "a" not in chars and "z" not in chars
    assert {"A", "0", " ", "-", "\n"} <= chars
    assert all(ord(c) < 128 for c in chars)


@pytest.mark.parametrize(
    "pattern",
    [
        r"a*",  # can match the empty string
        r"(?=x)",  # consumes nothing
        r"(a)?\1b",  # a back-reference may come first
        r"(?x) a",  # inline flags change what the parse means
        r"\p{L}+",  # not `re` syntax
    ],
)
def test_what_cannot_be_known_is_none(pattern: str) -> None:
    assert first_chars(pattern, False) is None


@pytest.mark.parametrize("kind", BUILTIN, ids=lambda kind: kind.name)
def test_every_match_of_a_built_in_pattern_begins_with_one_of_its_first_characters(kind: EntityKind) -> None:
    for source in kind.patterns:
        ignore_case = kind.ignore_case
        chars = first_chars(source, ignore_case)
        assert chars is not None, source  # every built-in pattern is skippable
        flags = regex.V0 | regex.ASCII | (regex.IGNORECASE if ignore_case else 0)
        compiled = regex.compile(source, flags)
        for text in _TEXTS:
            if not text.isascii():
                continue
            for match in compiled.finditer(text, overlapped=True):
                assert match.start() < len(text) and text[match.start()] in chars, (source, text)


_PATTERNS = [r"[a-c]x", r"(?i:ab)c?", r"(?<!\d)\d{2}", r"[^\w]y", r"\s?q", r"(?:-|\+)?\d", r"\Wz"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_PATTERNS), st.booleans(), st.text("abcxyzqABCXYZ019 -+_\n.", max_size=20))
def test_no_match_begins_outside_the_first_characters(pattern: str, ignore_case: bool, text: str) -> None:
    chars = first_chars(pattern, ignore_case)
    assert chars is not None
    compiled = regex.compile(pattern, regex.V0 | regex.ASCII | (regex.IGNORECASE if ignore_case else 0))
    for match in compiled.finditer(text, overlapped=True):
        assert text[match.start()] in chars
    # a partial match (a stream's text may go on) begins with one of them too, unless empty
    for pos in range(len(text)):
        found = compiled.search(text, pos, partial=True)
        if found is not None and found.start() < len(text):
            assert text[found.start()] in chars


@pytest.mark.parametrize(
    "text",
    [
        "plain words for a while, then -----BEGIN RSA PRIVATE KEY-----\nMIIB\n"
        "-----END RSA PRIVATE KEY----- ok",
        "the key is sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" + "T3BlbkFJ" + "Qa7sDf0gHj3kLz" + " done",
        "header: BeArEr abcdefghijklmnop1234 and more",
        "café déjà vu, mail jane.doe@example.com or 4111 1111 1111 1111 please",
        "no digits at all until 123-45-6789 here",
    ],
)
def test_an_entity_whose_first_character_arrives_alone_is_masked(text: str) -> None:
    whole = redact_whole(DETECTOR, text, marker)
    assert whole != text  # there is something to mask
    window = SlidingWindow(DETECTOR, marker)
    streamed = "".join(window.push(char) for char in text) + window.flush()
    assert streamed == whole
    window = SlidingWindow(DETECTOR, marker)
    words = text.split(" ")
    streamed = "".join(window.push(word if i == 0 else " " + word) for i, word in enumerate(words))
    assert streamed + window.flush() == whole


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (
            r"(?<![a-z])\d+(?![a-z]|\.\d)",
            "0123456789.",
        ),  # a look-behind reads nothing new; a look-ahead's last character decides it
        (r"[a-c]x(?=yz)", "abcxy"),
        (r"(?i:ab)-", "abAB-"),
        (r"q(?:r|s+t)", "qrst"),
    ],
)
def test_the_characters_a_match_in_progress_reads(pattern: str, expected: str) -> None:
    assert read_chars(pattern, False) == frozenset(expected)


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?x) a b", r"\p{L}+"])
def test_what_a_match_reads_is_none_when_not_known(pattern: str) -> None:
    assert read_chars(pattern, False) is None


_READ_PATTERNS = [*_PATTERNS, r"\d{2}(?![A-Za-z0-9_]|[./-][0-9])", r"x(?=ab|c)\w", r"(?<=a)b+c"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_READ_PATTERNS), st.booleans(), st.text("abcxyzqABCXYZ019 -+_\n./", max_size=20))
def test_a_match_in_progress_has_read_only_its_characters(pattern: str, ignore_case: bool, text: str) -> None:
    chars = read_chars(pattern, ignore_case)
    assert chars is not None
    compiled = regex.compile(pattern, regex.V0 | regex.ASCII | (regex.IGNORECASE if ignore_case else 0))
    for pos in range(len(text)):
        found = compiled.search(text, pos, partial=True)
        if found is not None and found.partial:
            assert set(text[found.start() :]) <= chars, (pattern, text, found)


@pytest.mark.parametrize("kind", BUILTIN, ids=lambda kind: kind.name)
def test_a_built_in_match_in_progress_has_read_only_its_characters(kind: EntityKind) -> None:
    flags = regex.V0 | regex.ASCII | (regex.IGNORECASE if kind.ignore_case else 0)
    for source in kind.patterns:
        chars = read_chars(source, kind.ignore_case)
        assert chars is not None, source
        compiled = regex.compile(source, flags)
        for text in _TEXTS:
            if not text.isascii():
                continue
            for end in range(1, len(text) + 1):
                found = compiled.search(text[:end], 0, partial=True)
                if found is not None and found.partial:
                    assert set(text[found.start() : end]) <= chars, (source, text[:end])
