"""The persistence scrub: every string of a record, at any depth, whatever the tenant's mode."""

from __future__ import annotations

import io
import logging

import orjson

from gateway.logs import JsonFormatter
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN
from gateway.redaction.scrub import Scrubber, scrub_record, scrub_text
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
