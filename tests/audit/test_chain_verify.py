"""The hash chain and its verification: an edited, a deleted and a swapped record are each
caught, and named for what happened to them."""

from __future__ import annotations

import orjson
import pytest

from gateway.audit.chain import GENESIS, ChainHead, canonical, record_hash, seal, sealed_line
from gateway.audit.verify import verify_chain


def _decision(n: int) -> dict[str, object]:
    return {
        "v": 1,
        "type": "decision",
        "decision_id": f"d{n}",
        "allow": n % 2 == 0,
        "input": {"tools": ["a", "b"], "n": n},
    }


def _log(count: int) -> list[bytes]:
    head = ChainHead()
    lines = []
    for n in range(1, count + 1):
        line, head = sealed_line(_decision(n), head)
        lines.append(line)
    return lines


def test_seal_links_records_and_leaves_the_input_alone() -> None:
    record = _decision(1)
    first, head = seal(record, ChainHead())
    second, head2 = seal(_decision(2), head)
    assert "seq" not in record
    assert (first["seq"], first["prev_hash"]) == (1, GENESIS)
    assert (second["seq"], second["prev_hash"]) == (2, first["hash"])
    assert head2 == ChainHead(2, second["hash"])
    assert record_hash(orjson.loads(canonical(second))) == second["hash"]


@pytest.mark.parametrize(
    "record",
    [
        _decision(1),
        {"v": 1, "seq": 99, "prev_hash": "x", "hash": "y", "input": {"z": [1, "é"], "a": None}},
        {},
    ],
)
def test_a_stored_line_is_the_sealed_record_with_its_hash(record: dict[str, object]) -> None:
    """`sealed_line` serialises once: its line holds what `seal` gives, chain fields the record
    carried replaced, and the same new head; the caller's dict is left alone."""
    head = ChainHead(7, "ab" * 32)
    before = dict(record)
    line, new_head = sealed_line(record, head)
    sealed, expected_head = seal(record, head)
    assert record == before
    assert orjson.loads(line) == sealed
    assert new_head == expected_head == ChainHead(8, sealed["hash"])
    assert record_hash(orjson.loads(line)) == sealed["hash"]
    assert line.endswith(b'"hash":"%s"}' % sealed["hash"].encode())  # the one key out of order


def test_an_intact_log_verifies() -> None:
    lines = _log(5)
    report = verify_chain(lines)
    assert report.ok
    assert report.records == 5
    assert report.head_hash == orjson.loads(lines[-1])["hash"]
    assert verify_chain([]).ok


def test_an_edited_record_is_caught() -> None:
    lines = _log(5)
    record = orjson.loads(lines[2])
    record["allow"] = not record["allow"]
    lines[2] = canonical(record)
    report = verify_chain(lines)
    assert report.problem is not None
    assert (report.problem.seq, report.problem.kind) == (3, "altered")
    assert report.records == 2
    assert str(report.problem) == "record 3 (seq 3): altered: its content does not match its hash"


def test_an_edited_record_with_its_hash_recomputed_is_caught_at_the_next() -> None:
    lines = _log(5)
    record = orjson.loads(lines[2])
    record["input"]["tools"] = ["a"]
    record["hash"] = record_hash(record)
    lines[2] = canonical(record)
    report = verify_chain(lines)
    assert report.problem is not None
    assert (report.problem.seq, report.problem.kind) == (4, "altered")
    assert "prev_hash" in report.problem.detail


@pytest.mark.parametrize(("deleted", "seen_at"), [(0, 2), (2, 4), (1, 3)])
def test_a_deleted_record_is_caught(deleted: int, seen_at: int) -> None:
    lines = _log(5)
    del lines[deleted]
    report = verify_chain(lines)
    assert report.problem is not None
    assert (report.problem.seq, report.problem.kind) == (seen_at, "removed")
    assert report.problem.detail == f"seq {deleted + 1} missing before it"


def test_two_deleted_records_are_named() -> None:
    lines = _log(6)
    del lines[2:4]
    report = verify_chain(lines)
    assert report.problem is not None
    assert report.problem.detail == "seq 3 to 4 missing before it"


@pytest.mark.parametrize(("a", "b"), [(1, 2), (0, 4), (3, 4)])
def test_swapped_records_are_caught(a: int, b: int) -> None:
    lines = _log(5)
    lines[a], lines[b] = lines[b], lines[a]
    report = verify_chain(lines)
    assert report.problem is not None
    assert report.problem.kind == "reordered"
    assert report.problem.position == a + 1


def test_a_replayed_record_is_caught() -> None:
    lines = _log(3)
    lines.append(lines[1])
    report = verify_chain(lines)
    assert report.problem is not None
    assert (report.problem.position, report.problem.kind) == (4, "reordered")


@pytest.mark.parametrize("junk", [b"{not json", b"[1, 2]", b'{"seq": 1}'])
def test_unreadable_lines_are_caught(junk: bytes) -> None:
    lines = _log(3)
    lines.insert(1, junk)
    report = verify_chain(lines)
    assert report.problem is not None
    assert (report.problem.position, report.problem.kind) == (2, "unreadable")


def test_a_forged_first_record_is_caught() -> None:
    lines = _log(2)
    record = orjson.loads(lines[0])
    record["prev_hash"] = "f" * 64
    record["hash"] = record_hash(record)
    lines[0] = canonical(record)
    report = verify_chain(lines)
    assert report.problem is not None
    assert (report.problem.seq, report.problem.kind) == (1, "altered")
    assert "start of the log" in report.problem.detail
