"""The persistence scrub: every string of a record, at any depth, whatever the tenant's mode."""

from __future__ import annotations

import io
import logging

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.logs import JsonFormatter
from gateway.redaction.detector import Catalog, Found, Verdicts
from gateway.redaction.entities import BUILTIN, custom_pattern, literal_terms
from gateway.redaction.joined import separator_blind
from gateway.redaction.marks import Settled, Verbatim
from gateway.redaction.scrub import (
    CLEAN_MAX_CHARS,
    CLEAN_MAX_SETTLED,
    CLEAN_MAX_STRINGS,
    Scrubber,
    scrub_record,
    scrub_text,
)
from tests.redaction.corpus import JWT, PEM, POSITIVES

SECRET_FILLED = (
    "mail jane.doe@example.com, card 4111 1111 1111 1111, key AKIAIOSFODNN7EXAMPLE, "
    f"jwt {JWT}, iban DE89 3704 0044 0532 0130 00, from 10.1.2.3\n{PEM}"
)
CASES = [case for cases in POSITIVES.values() for case in cases]


def test_scrub_text_masks_every_builtin_kind() -> None:
    assert scrub_text("write to jane.doe@example.com") == "write to [EMAIL]"
    for text, value in CASES:
        assert value not in scrub_text(text), value


def test_scrub_record_reaches_every_string_and_keeps_the_shape() -> None:
    record = {
        "msg": "user jane.doe@example.com",
        "n": 3,
        "nested": {"list": ["4111 1111 1111 1111", ("AKIAIOSFODNN7EXAMPLE", 5)], "none": None},
    }
    assert scrub_record(record) == {
        "msg": "user [EMAIL]",
        "n": 3,
        "nested": {"list": ["[CREDIT_CARD]", ("[AWS_ACCESS_KEY]", 5)], "none": None},
    }


def test_a_clean_record_comes_back_untouched() -> None:
    record = {"request_id": "req_abc", "status": 200, "tags": ["a", "b"]}
    assert scrub_record(record) is record


def test_the_gateways_own_text_is_never_scrubbed_and_the_same_text_of_a_clients_is() -> None:
    minted = "req_6151522766162256c0468f9681be4195"  # random hex whose digits pass the card check
    assert scrub_text(minted) == "req_[CREDIT_CARD]c0468f9681be4195"
    assert scrub_text(Verbatim(minted)) == minted
    record = {"request_id": Verbatim(minted), "spans": [Verbatim(minted), minted]}
    assert scrub_record(record) == {
        "request_id": minted,
        "spans": [minted, "req_[CREDIT_CARD]c0468f9681be4195"],
    }


def test_configured_secrets_are_masked_as_literals() -> None:
    scrubber = Scrubber(Catalog(BUILTIN).detector(), ["upstream-credential-123"])
    assert scrubber.text("auth upstream-credential-123 failed") == "auth [SECRET] failed"
    assert scrubber.record({"a": ["upstream-credential-123"]}) == {"a": ["[SECRET]"]}


def test_the_json_log_formatter_scrubs_message_fields_and_traceback() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(Scrubber(Catalog(BUILTIN).detector(), ["upstream-credential-123"])))
    logger = logging.getLogger("tests.redaction.scrub")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError(f"bad value {SECRET_FILLED}")
        except ValueError:
            logger.exception(
                "failed for %s",
                "jane.doe@example.com",
                extra={"detail": SECRET_FILLED, "obj": ValueError(PEM)},
            )
        logger.warning("upstream-credential-123 rejected")
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    lines = [orjson.loads(line) for line in output.splitlines()]
    assert lines[0]["msg"] == "failed for [EMAIL]"
    assert "[PRIVATE_KEY]" in lines[0]["detail"]
    assert lines[1]["msg"] == "[SECRET] rejected"
    for value in (
        "jane.doe@example.com",
        "4111 1111 1111 1111",
        "AKIAIOSFODNN7EXAMPLE",
        JWT,
        "MIIEowIBAAKCAQEA",
    ):
        assert value not in output


def test_strings_seen_clean_are_not_scanned_again() -> None:
    scanned: list[str] = []

    class Counting(Catalog):
        def find(self, text: str, names: frozenset[str], verdicts: Verdicts | None = None) -> list[Found]:
            scanned.append(text)
            return super().find(text, names, verdicts)

    scrubber = Scrubber(Counting(BUILTIN).detector(), ["upstream-credential-123"])
    line = {"tenant": "acme", "model": "chat", "n": 3, "tags": ["a", ("b",)], "request_id": "req_1"}
    assert scrubber.record(line) is line
    assert len(scanned) == 1
    assert scrubber.record(dict(line)) == line  # every string seen clean: no scan at all
    assert len(scanned) == 1
    assert scrubber.record({**line, "request_id": "req_2"})["request_id"] == "req_2"
    assert scanned[-1] == "req_2"  # only the unseen string is scanned
    assert scrubber.text("acme") == "acme"
    assert len(scanned) == 2


def test_what_is_not_clean_is_never_remembered() -> None:
    scrubber = Scrubber(Catalog(BUILTIN).detector(), ["upstream-credential-123"])
    for _ in range(3):  # the same values, again and again: masked every time
        assert scrubber.record({"a": "mail jane.doe@example.com", "b": "ok"}) == {
            "a": "mail [EMAIL]",
            "b": "ok",
        }
        assert scrubber.record({"a": "key upstream-credential-123"}) == {"a": "key [SECRET]"}
        assert scrubber.text("4111 1111 1111 1111") == "[CREDIT_CARD]"
    assert scrubber.record(["ok", "upstream-credential-123"]) == ["ok", "[SECRET]"]
    # A string clean for the built-in kinds holds a configured credential: not clean for this one.
    other = Scrubber(Catalog(BUILTIN).detector())
    assert other.text("key upstream-credential-123") == "key upstream-credential-123"
    assert scrubber.text("key upstream-credential-123") == "key [SECRET]"


def _counting() -> tuple[Scrubber, list[str]]:
    scanned: list[str] = []

    class Counting(Catalog):
        def find(self, text: str, names: frozenset[str], verdicts: Verdicts | None = None) -> list[Found]:
            scanned.append(text)
            return super().find(text, names, verdicts)

    return Scrubber(Counting(BUILTIN).detector()), scanned


LONG = "a clean paragraph " * 20  # too long to be remembered clean: scanned wherever it is walked


def test_a_settled_dict_found_clean_is_walked_again_only_for_its_variable_entries() -> None:
    scrubber, scanned = _counting()

    def document(request_id: str) -> Settled:
        return Settled({"text": LONG, "tools": ["a"], "request_id": request_id}, b"shape-1", ("request_id",))

    assert scrubber.record({"input": document("req_1"), "n": 1})["input"]["text"] == LONG
    assert len(scanned) == 1
    assert scrubber.record({"input": document("req_2"), "n": 2}) == {"input": document("req_2"), "n": 2}
    assert scanned[1:] == ["req_2"]  # the fixed content not walked, the request id scanned
    masked = scrubber.record({"input": document("jane.doe@example.com")})
    assert masked == {"input": {"text": LONG, "tools": ["a"], "request_id": "[EMAIL]"}}
    # A plain dict of the same content is walked every time.
    before = sum(LONG in text for text in scanned)
    plain = {"text": LONG, "request_id": "req_3"}
    scrubber.record(plain)
    scrubber.record(plain)
    assert sum(LONG in text for text in scanned) == before + 2


def test_a_settled_dict_with_something_to_hide_is_scrubbed_every_time() -> None:
    scrubber, _ = _counting()
    for _ in range(3):
        dirty = Settled({"text": "mail jane.doe@example.com", "ok": "fine"}, b"shape-2")
        assert scrubber.record({"input": dirty}) == {"input": {"text": "mail [EMAIL]", "ok": "fine"}}
    # Another key is not known clean because one was.
    assert scrubber.record(Settled({"ok": "fine"}, b"shape-3")) == {"ok": "fine"}
    assert scrubber.record(Settled({"ok": "card 4111 1111 1111 1111"}, b"shape-4")) == {
        "ok": "card [CREDIT_CARD]"
    }


def test_a_settled_dict_without_a_key_is_known_clean_as_that_very_dict() -> None:
    scrubber, scanned = _counting()
    shared = Settled({"text": LONG, "nested": {"list": ["x"]}})
    record = {"decision": shared, "id": Verbatim("ab12")}
    assert scrubber.record(record) is record
    assert scrubber.record({"decision": shared}) == {"decision": shared}
    assert sum(LONG in text for text in scanned) == 1
    other = Settled({"text": LONG, "nested": {"list": ["x"]}})  # equal, but another dict: walked
    scrubber.record({"decision": other})
    assert sum(LONG in text for text in scanned) == 2
    dirty = Settled({"text": "mail jane.doe@example.com"})
    assert scrubber.record({"decision": dirty}) == {"decision": {"text": "mail [EMAIL]"}}


def test_the_table_of_settled_dicts_found_clean_is_bounded() -> None:
    scrubber = Scrubber(Catalog(BUILTIN).detector())
    for n in range(3 * CLEAN_MAX_SETTLED):
        scrubber.record({"input": Settled({"n": f"value {n}"}, b"shape %d" % n)})
        assert len(scrubber._settled) <= CLEAN_MAX_SETTLED


_TEXTS = st.sampled_from(
    ["ok", "acme", LONG, "jane.doe@example.com", "card 4111 1111 1111 1111", "AKIAIOSFODNN7EXAMPLE", "req_9"]
)
_PLAIN = st.recursive(
    _TEXTS | st.integers(0, 9) | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
    max_leaves=12,
)


def _settled(content: dict[str, object], variable: tuple[str, ...], keyed: bool) -> Settled:
    fixed = {name: value for name, value in content.items() if name not in variable}
    key = orjson.dumps(fixed, option=orjson.OPT_SORT_KEYS) if keyed else None
    return Settled(content, key, variable)


_RECORDS = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from("abcd"), _PLAIN, max_size=4),
        st.lists(st.sampled_from("abcd"), max_size=2, unique=True).map(tuple),
        st.booleans(),
        _TEXTS,
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(_RECORDS)
def test_settled_dicts_are_scrubbed_as_plain_ones_would_be(records: list[tuple]) -> None:
    """Whatever came before: a scrubber that has seen Settled dicts masks what the plain
    scrub masks in the same record made of plain dicts."""
    scrubber = Scrubber(Catalog(BUILTIN).detector())
    for content, variable, keyed, outside in records * 2:
        record = {"input": _settled(content, variable, keyed), "outside": outside}
        plain = orjson.loads(orjson.dumps(record))
        assert scrubber.record(record) == scrub_record(plain)


def test_the_table_of_clean_strings_is_bounded() -> None:
    scrubber = Scrubber(Catalog(BUILTIN).detector())
    for start in range(0, 3 * CLEAN_MAX_STRINGS, 100):
        scrubber.record([f"value {i}" for i in range(start, start + 100)])
        assert len(scrubber._clean) <= CLEAN_MAX_STRINGS + 100
    long = "x" * (CLEAN_MAX_CHARS + 1)
    assert scrubber.record({"long": long})["long"] is long
    assert long not in scrubber._clean


def test_custom_kinds_and_joining() -> None:
    # Every built-in pattern, and the usual custom ones, give one joined scan the same answer
    # as a scan of each string.
    assert all(separator_blind(pattern) for kind in BUILTIN for pattern in kind.patterns)
    assert separator_blind(custom_pattern("EMPLOYEE_ID", r"EMP-\d{6}").patterns[0])
    assert separator_blind(literal_terms("CODENAME", ["Bluebird", "Night Jar"]).patterns[0])
    for pattern in (r"^EMP-\d{6}$", r"\AEMP", r"(?!a.)x", r"(?<![^a-z])x", r"(?>[^,]+)(?<!y)", r"(?<=.)x"):
        assert not separator_blind(pattern), pattern
    # A pattern that only matches a whole string: each string is scanned on its own.
    anchored = Catalog((*BUILTIN, custom_pattern("EMPLOYEE_ID", r"^EMP-\d{6}$")))
    scrubber = Scrubber(anchored.detector())
    record = {"who": "someone", "id": "EMP-123456", "mail": "a@b.example"}
    assert scrubber.record(record) == {"who": "someone", "id": "[EMPLOYEE_ID]", "mail": "[EMAIL]"}
    assert scrubber.record({"who": "someone", "id": "EMP-123456"}) == {
        "who": "someone",
        "id": "[EMPLOYEE_ID]",
    }
    custom = Scrubber(Catalog((*BUILTIN, literal_terms("CODENAME", ["Bluebird"]))).detector())
    assert custom.record({"a": "x", "b": "project bluebird"}) == {"a": "x", "b": "project [CODENAME]"}
    assert custom.record({"a": "x", "b": "project bluebird"}) == {"a": "x", "b": "project [CODENAME]"}
