"""The detector against the labelled corpus, and the prefiltered scan against the exact one."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.redaction import checks
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN, GROUPS, EntityKind, custom_pattern, literal_terms, select
from gateway.redaction.prefilter import loosened
from tests.redaction.corpus import NEAR_MISSES, NEGATIVES, PLACEHOLDERS, POSITIVES
from tests.redaction.generated import entities, ibans, in_prose, shown

CATALOG = Catalog(BUILTIN)
ALL = CATALOG.detector()

POSITIVE_CASES = [(kind, text, value) for kind, cases in POSITIVES.items() for text, value in cases]
NEAR_MISS_CASES = [(kind, text) for kind, texts in NEAR_MISSES.items() for text in texts]


def test_every_builtin_kind_has_positives_and_near_misses() -> None:
    names = {kind.name for kind in BUILTIN}
    assert set(POSITIVES) == names
    assert set(NEAR_MISSES) == names


@pytest.mark.parametrize(("kind", "text", "value"), POSITIVE_CASES)
def test_positive_is_found_exactly(kind: str, text: str, value: str) -> None:
    found = ALL.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, value)]


@pytest.mark.parametrize(("kind", "text"), NEAR_MISS_CASES)
def test_near_miss_is_not_taken_for_the_kind(kind: str, text: str) -> None:
    assert kind not in {f.kind for f in ALL.find(text)}


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_holds_no_entity(text: str) -> None:
    assert [(f.kind, text[f.start : f.end]) for f in ALL.find(text)] == []


@pytest.mark.parametrize("text", PLACEHOLDERS)
def test_a_placeholder_is_no_credential(text: str) -> None:
    assert [(f.kind, text[f.start : f.end]) for f in ALL.find(text)] == []


@settings(max_examples=500, deadline=None)
@given(in_prose(entities()))
def test_every_generated_entity_is_found_exactly(case: tuple[str, str, str]) -> None:
    kind, value, text = case
    assert [(f.kind, text[f.start : f.end]) for f in ALL.find(text)] == [(kind, value)]


@settings(max_examples=300, deadline=None)
@given(in_prose(shown(ibans(valid=False))))
def test_no_part_of_an_iban_with_a_wrong_checksum_is_found(case: tuple[str, str, str]) -> None:
    _, _, text = case
    assert [(f.kind, text[f.start : f.end]) for f in ALL.find(text)] == []
    assert ALL.scan(text, 0, final=True)[0] == []


def test_an_iban_look_alike_hides_only_what_lies_inside_it() -> None:
    text = "DE89 3704 0044 0532 0130 01 or call 0532 0130 01 today"
    assert [(f.kind, text[f.start : f.end]) for f in ALL.find(text)] == [("PHONE", "0532 0130 01")]
    assert ALL.find(text) == ALL.scan(text, 0, final=True)[0]


def test_a_detector_finds_only_the_kinds_it_was_given() -> None:
    text = "jane.doe@example.com, 4111 1111 1111 1111, AKIAIOSFODNN7EXAMPLE"
    assert [f.kind for f in CATALOG.detector({"EMAIL"}).find(text)] == ["EMAIL"]
    api = CATALOG.detector(k.name for k in select(["API_KEY"], BUILTIN))
    assert [f.kind for f in api.find(text)] == ["AWS_ACCESS_KEY"]
    assert {k.name for k in select([], BUILTIN)} == {k.name for k in BUILTIN}
    assert GROUPS["API_KEY"] <= GROUPS["SECRET"]


def test_custom_patterns_and_literal_terms() -> None:
    catalog = Catalog(
        (
            *BUILTIN,
            custom_pattern("EMPLOYEE_ID", r"EMP-\d{6}"),
            literal_terms("CODENAME", ["Bluebird", "Night Jar"]),
        )
    )
    text = "EMP-123456 works on project bluebird and NIGHT JAR, not bluebirds"
    found = [(f.kind, text[f.start : f.end]) for f in catalog.detector().find(text)]
    assert found == [("EMPLOYEE_ID", "EMP-123456"), ("CODENAME", "bluebird"), ("CODENAME", "NIGHT JAR")]


def test_non_ascii_text_keeps_offsets() -> None:
    text = "Grüße an jürgen — mail jürgen.x@example.com oder 4111 1111 1111 1111 ✓"
    found = [(f.kind, text[f.start : f.end]) for f in ALL.find(text)]
    assert found == [("EMAIL", "jürgen.x@example.com"), ("CREDIT_CARD", "4111 1111 1111 1111")]


# Characters entities are made of, plus separators, so that random texts are full of
# near-entities, fragments and overlaps.
_ALPHABET = "0123456789abcdefxyzAKISEFG@.-_+: \n()/=<>eyJ"
_PIECES = [value for cases in POSITIVES.values() for _, value in cases] + [
    t for texts in (*NEAR_MISSES.values(), NEGATIVES, PLACEHOLDERS) for t in texts
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(_ALPHABET, max_size=12), st.sampled_from(_PIECES)), max_size=12))
def test_prefiltered_find_equals_the_exact_scan(pieces: list[str]) -> None:
    text = "".join(pieces)
    found, hold = ALL.scan(text, 0, final=True)
    assert hold == len(text)
    assert ALL.find(text) == found


def _long_text(seed: int) -> str:
    """Some KB of prose, numbers, code and entities (every corpus piece, near-misses too), so
    that prefilter regions hold several entities, look-alikes and overlaps."""
    rnd = random.Random(seed)
    words = ["the", "order", "ref", "x = [1, 2]", "port 8080", "ts=1715950000", "v1.2.3", "a::b", "@app"]
    words += ["2024-05-17T12:30:45Z", "id 9f8e7d6c", "HTTP/1.1", "-", ".", "\n", "Bearer", "key:", "0", "+"]
    out = []
    for _ in range(1500):
        out.append(rnd.choice(_PIECES) if rnd.random() < 0.08 else rnd.choice(words))
        out.append(rnd.choice((" ", " ", " ", "", ", ", "\n", "-", ".")))
    return "".join(out)


@pytest.mark.parametrize("seed", range(12))
def test_prefiltered_find_equals_the_exact_scan_on_long_texts(seed: int) -> None:
    text = _long_text(seed)
    found, hold = ALL.scan(text, 0, final=True)
    assert hold == len(text)
    assert len(found) > 25
    assert ALL.find(text) == found


def test_a_per_request_detector_finds_the_same_and_only_it_remembers() -> None:
    per_request = CATALOG.detector(per_request=True)
    for seed in range(4):
        text = _long_text(seed)
        assert per_request.find(text) == ALL.find(text)
        assert per_request.scan(text, 0, final=True) == ALL.scan(text, 0, final=True)
    assert per_request._verdicts  # validator verdicts, kept for the request's texts
    assert ALL._verdicts is None  # a shared detector (the log scrubber's) keeps no value


CUSTOM = Catalog(
    (
        *BUILTIN,
        custom_pattern("NOT_QUESTION", r"a[^?]b"),
        custom_pattern("EMPLOYEE_ID", r"EMP-\d{6}"),
        literal_terms("CODENAME", ["Bluebird"]),
    )
).detector()


def test_a_custom_pattern_sees_non_ascii_text_as_it_is() -> None:
    # The prefilter sees "é" as "?"; a custom pattern that tells them apart must still match.
    text = "xx aéb yy a?b EMP-123456 über bluebird"
    found = [(f.kind, text[f.start : f.end]) for f in CUSTOM.find(text)]
    assert found == [("NOT_QUESTION", "aéb"), ("EMPLOYEE_ID", "EMP-123456"), ("CODENAME", "bluebird")]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.text("abé?ü EMP-0123456789@x.", max_size=10), st.sampled_from(_PIECES)), max_size=10
    )
)
def test_custom_kinds_find_equals_the_exact_scan(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert CUSTOM.find(text) == CUSTOM.scan(text, 0, final=True)[0]


def test_a_look_ahead_with_alternatives_is_loosened_to_its_single_character_one() -> None:
    # "Not a digit, and not a dot before a digit" is loosened to "not a digit", consumed: one
    # reported end per match, where dropping the look-ahead reported every end along a token.
    assert loosened(r"ab(?![0-9]|\.[0-9])") == r"ab(?:[^0-9]|$)"
    assert loosened(r"ab(?!\.[0-9]|[x|y])") == r"ab(?:[^x|y]|$)"
    assert loosened(r"ab(?!\.[0-9])") == r"ab"


def test_a_remembered_verdict_keeps_the_kind_of_the_pattern_that_found_the_value() -> None:
    # Two kinds share a validator: a value one of them checked is still found as the other's.
    catalog = Catalog(
        (
            EntityKind("FIRST", (r"one=(?P<v>[a-z0-9]{8})",), checks.not_placeholder),
            EntityKind("SECOND", (r"two=(?P<v>[a-z0-9]{8})",), checks.not_placeholder),
        )
    )
    detector = catalog.detector(per_request=True)
    assert [f.kind for f in detector.find("two=abcd1234")] == ["SECOND"]
    assert [f.kind for f in detector.find("one=abcd1234")] == ["FIRST"]


# What `none_in` is asked about: a request's short texts, clean or holding an entity, and the
# halves of entities, which no text holds whole.
_SNIPPETS = [
    *NEGATIVES,
    *(text for cases in POSITIVES.values() for text, _ in cases),
    *(
        half
        for cases in POSITIVES.values()
        for _, value in cases
        for half in (value[: len(value) // 2], value[len(value) // 2 :])
    ),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_SNIPPETS), min_size=1, max_size=12))
def test_texts_scanned_together_say_what_each_scan_would(texts: list[str]) -> None:
    assert ALL.none_in(texts) == all(not ALL.find(text) for text in texts)


def test_an_entity_split_between_two_texts_is_in_neither() -> None:
    email = "jane.doe@example.com"
    halves = [email[:9], email[9:]]
    assert ALL.none_in(halves)
    assert not ALL.none_in([*halves, email])
    assert CATALOG.joinable(ALL.names)


def test_kinds_whose_patterns_see_the_separator_are_scanned_one_by_one() -> None:
    # `\Z` ends the joined text only: joined, "Z9" at the end of the first text would be missed.
    kind = custom_pattern("TAIL_CODE", r"Z9\Z")
    catalog = Catalog([*BUILTIN, kind])
    assert not catalog.joinable(frozenset({"TAIL_CODE"}))
    assert catalog.joinable(frozenset({"EMAIL"}))
    detector = catalog.detector({"TAIL_CODE"})
    assert not detector.none_in(["code Z9", "more"])
    assert detector.none_in(["code Z8", "more"])
