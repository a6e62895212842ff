"""The sliding window: for any text and any way of cutting it into chunks, the streamed
output equals the output for the whole text; and it holds back only what it must."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.redaction.detector import Catalog, Found
from gateway.redaction.entities import BUILTIN, custom_pattern, literal_terms
from gateway.redaction.scrub import marker
from gateway.redaction.tokens import PlaceholderFinder, Vault
from gateway.redaction.window import Finder, Replacement, SlidingWindow, redact_whole
from tests.redaction.corpus import NEAR_MISSES, NEGATIVES, PLACEHOLDERS, POSITIVES
from tests.redaction.generated import entities, ibans, in_prose, shown

DETECTOR = Catalog(BUILTIN).detector()
_ALPHABET = "0123456789abcxyzAKISE@.-_+: \n()/=<>"
_PIECES = [
    *(value for cases in POSITIVES.values() for _, value in cases),
    *(text for texts in (*NEAR_MISSES.values(), NEGATIVES, PLACEHOLDERS) for text in texts),
    "<EMAIL_1>",
    "<PHONE_2>",
    "<EMAIL_7>",
    " ",
    "\n",
]
texts = st.lists(st.one_of(st.text(_ALPHABET, max_size=10), st.sampled_from(_PIECES)), max_size=10).map(
    "".join
)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(texts)
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=max(1, len(text) // 2))))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds)]


def streamed(finder: Finder, replacement: Replacement, chunks: list[str], stop: bool = False) -> str:
    window = SlidingWindow(finder, replacement, stop_at_first=stop)
    return "".join(window.push(chunk) for chunk in chunks) + window.flush()


@settings(max_examples=400, deadline=None)
@given(chunked())
def test_masking_a_stream_equals_masking_the_whole(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    assert streamed(DETECTOR, marker, chunks) == redact_whole(DETECTOR, text, marker)


# Variable-length entities (multi-label and hyphenated domains, URLs, JWTs, phones, IBANs valid
# or not, keys) in prose, next to one another and to fragments: a greedy match that a
# shorter complete match hides until more text arrives is what these catch.
_ENTITY_TEXTS = st.lists(
    st.one_of(
        in_prose(entities()).map(lambda case: case[2]),
        in_prose(shown(ibans(valid=False))).map(lambda case: case[2]),
        st.text(_ALPHABET, max_size=6),
    ),
    min_size=1,
    max_size=5,
).map("".join)


@st.composite
def chunked_entities(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(_ENTITY_TEXTS)
    if draw(st.booleans()):
        return text, list(text)  # one character per chunk, as token streams often are
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=max(1, len(text) // 3))))
    return text, [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


@settings(max_examples=400, deadline=None)
@given(chunked_entities())
def test_masking_streamed_entities_equals_masking_the_whole(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    assert streamed(DETECTOR, marker, chunks) == redact_whole(DETECTOR, text, marker)


@settings(max_examples=150, deadline=None)
@given(chunked_entities())
def test_blocking_streamed_entities_stops_where_the_whole_text_stops(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    assert streamed(DETECTOR, marker, chunks, stop=True) == redact_whole(DETECTOR, text, marker, True)


_SPLIT_CASES = [
    "x a@bb.cc.uni-example.de",
    "mail a.b@mx-1.eu-west.mail.uni-example.co.uk, or call",
    "see https://example.com/u?email=jo@dept.uni-x.ac.at&x=1 now",
    "token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc-def_ghi.",
    "ring 1-415-555-0132, 030/1234567 or +44 20 7946 0958.",
    "IBAN DE89 3704 0044 0532 0130 00, not DE89 3704 0044 0532 0130 01.",
]


@pytest.mark.parametrize("text", _SPLIT_CASES)
def test_every_split_of_a_long_entity_masks_as_the_whole(text: str) -> None:
    whole = redact_whole(DETECTOR, text, marker)
    assert streamed(DETECTOR, marker, list(text)) == whole
    for cut in range(len(text) + 1):
        assert streamed(DETECTOR, marker, [text[:cut], text[cut:]]) == whole, cut


@settings(max_examples=200, deadline=None)
@given(chunked())
def test_blocking_a_stream_stops_where_the_whole_text_stops(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    assert streamed(DETECTOR, marker, chunks, stop=True) == redact_whole(DETECTOR, text, marker, True)


def _vault() -> Vault:
    vault = Vault()
    assert vault.placeholder("EMAIL", "jane@example.com") == "<EMAIL_1>"
    assert vault.placeholder("PHONE", "+14155552671") == "<PHONE_1>"
    assert vault.placeholder("PHONE", "+442079460958") == "<PHONE_2>"
    return vault


@settings(max_examples=300, deadline=None)
@given(chunked())
def test_restoring_a_stream_equals_restoring_the_whole(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    vault = _vault()
    finder = PlaceholderFinder(vault)
    assert streamed(finder, vault.restore, chunks) == redact_whole(finder, text, vault.restore)


def test_plain_text_is_released_at_once() -> None:
    window = SlidingWindow(DETECTOR, marker)
    # Nothing here can begin an entity: every character goes out with the chunk it came in.
    assert window.push("Hello, ") == "Hello, "
    assert window.push("(ok) ") == "(ok) "
    # A word may still become the local part of an email: held, then released with the next chunk.
    assert window.push("world") == ""
    assert window.push("! ") == "world! "
    assert window.holding == 0


def test_an_entity_split_across_chunks_is_still_masked() -> None:
    window = SlidingWindow(DETECTOR, marker)
    chunks = ["card 41", "11 1111 11", "11 1111", " thanks"]
    out = "".join(window.push(c) for c in chunks) + window.flush()
    assert out == "card [CREDIT_CARD] thanks"
    assert window.holding == 0


def test_a_split_placeholder_is_restored_and_an_invented_one_left_alone() -> None:
    vault = _vault()
    window = SlidingWindow(PlaceholderFinder(vault), vault.restore)
    out = [window.push(c) for c in ["Mail <EM", "AIL_", "1> or <EMAIL_9> now"]]
    assert out == ["Mail ", "", "jane@example.com or <EMAIL_9> now"]


def test_restoring_inside_json_escapes_the_value() -> None:
    vault = Vault()
    placeholder = vault.placeholder("PRIVATE_KEY", 'line1\nline "2"')
    found = Found(0, len(placeholder), "PRIVATE_KEY", 0, len(placeholder))
    assert vault.restore_in_json(found, placeholder) == 'line1\\nline \\"2\\"'


def test_placeholders_the_client_wrote_are_never_issued() -> None:
    vault = Vault(reserved=["<EMAIL_1>"])
    assert vault.placeholder("EMAIL", "a@example.com") == "<EMAIL_2>"
    assert vault.placeholder("EMAIL", "a@example.com") == "<EMAIL_2>"
    assert vault.placeholder("EMAIL", "b@example.com") == "<EMAIL_3>"
    assert vault.value("<EMAIL_1>") is None


def test_a_finished_long_entity_is_released_once_it_can_no_longer_grow() -> None:
    window = SlidingWindow(DETECTOR, marker)
    text = "x a@bb.cc.uni-example.de, and 1-415-555-0132 too. "
    out = "".join(window.push(char) for char in text)
    assert out == "x [EMAIL], and [PHONE] too. "
    assert window.holding == 0


_WITH_CUSTOM = Catalog(
    [
        *BUILTIN,
        custom_pattern("EMPLOYEE_ID", r"EMP-\d{6}(?![0-9])"),
        custom_pattern("TICKET", r"(?i:tk)-[a-z]{2}\d{3}"),
        literal_terms("CODENAME", ["Bluebird", "Night Jar"]),
    ]
).detector()


@settings(max_examples=300, deadline=None)
@example(DETECTOR, "4222222222222 x", 0)
@example(_WITH_CUSTOM, "id EMP-123456 ok", 3)
@given(st.sampled_from([DETECTOR, _WITH_CUSTOM]), texts, st.integers(0, 60))
def test_a_streams_scan_holds_and_finds_as_searching_every_pattern(
    detector: Finder, text: str, skip: int
) -> None:
    # An ASCII text's scan looks for a match in progress only where one can be (the text's tail
    # of the characters such a match reads); a non-ASCII character before the scanned stretch
    # turns that off and every pattern is searched from the scan's start. Both must agree.
    text = "ab, " + text + " EMP-12345 tk-ab12 Night J"[: skip % 27]
    pos = 4 + skip % (len(text) - 3)  # anywhere from the context's end to the text's
    fast_found, fast_hold = detector.scan(text, pos)
    every_found, every_hold = detector.scan("é" + text, pos + 1)
    assert fast_hold + 1 == every_hold
    assert [(f.start + 1, f.end + 1, f.kind) for f in fast_found] == [
        (f.start, f.end, f.kind) for f in every_found
    ]


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("call 1-415-555-0132.", "1-415-555-0132."),  # a full stop may begin ".5": the phone may go on
        ("ip 10.0.", "10.0."),
        ("card 4111 1111 1111 ", "4111 1111 1111 "),
        ("tok3 tok4 tok5", "tok5"),
        ("plain words, then (", "("),  # "(415) ..."
        ("plain words, then; ", ""),
    ],
)
def test_a_stream_holds_exactly_the_match_in_progress(text: str, held: str) -> None:
    window = SlidingWindow(DETECTOR, marker)
    released = window.push(text)
    assert window.holding == len(held)
    assert released + held == text
