"""`tollgate audit verify`: exit 0 on an intact log, 1 with the first broken record named,
2 when the log cannot be read; over a file and over a Redis stream."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest
from redis import Redis

from gateway.audit.chain import ChainHead, canonical, seal
from gateway.cli import main
from tests.harness import free_port

REDIS_URL = "redis://127.0.0.1:6379/0"


def _write_log(path: Path, count: int) -> list[bytes]:
    head = ChainHead()
    lines = []
    for n in range(count):
        sealed, head = seal({"v": 1, "type": "decision", "decision_id": f"d{n}", "allow": True}, head)
        lines.append(canonical(sealed))
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return lines


def test_an_intact_file_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    lines = _write_log(path, 4)
    assert main(["audit", "verify", "--path", str(path)]) == 0
    head = orjson.loads(lines[-1])["hash"]
    assert capsys.readouterr().out == f"{path}: ok (4 records, head hash {head})\n"


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("edit", "BROKEN at record 2 (seq 2): altered: its content does not match its hash"),
        ("delete", "BROKEN at record 2 (seq 3): removed: seq 2 missing before it"),
        ("swap", "BROKEN at record 2 (seq 3): reordered: expected seq 2 here; it appears later"),
    ],
)
def test_a_tampered_file_is_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tamper: str, message: str
) -> None:
    path = tmp_path / "audit.jsonl"
    lines = _write_log(path, 4)
    if tamper == "edit":
        lines[1] = lines[1].replace(b'"allow":true', b'"allow":false')
    elif tamper == "delete":
        del lines[1]
    else:
        lines[1], lines[2] = lines[2], lines[1]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    assert main(["audit", "verify", "--path", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"{path}: {message}\nIntact records before it: 1.\n"


def test_a_missing_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "verify", "--path", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_exactly_one_source_is_required(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["audit", "verify"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit):
        main(["audit", "verify", "--path", str(tmp_path), "--redis", REDIS_URL])


def test_a_redis_stream_verifies_and_a_tampered_one_does_not(capsys: pytest.CaptureFixture[str]) -> None:
    stream = f"test:audit:{uuid.uuid4().hex}"
    client = Redis.from_url(REDIS_URL)
    try:
        head = ChainHead()
        ids = []
        for n in range(3):
            sealed, head = seal({"v": 1, "decision_id": f"d{n}"}, head)
            ids.append(
                client.xadd(
                    stream, {"seq": sealed["seq"], "hash": sealed["hash"], "record": canonical(sealed)}
                )
            )
        assert main(["audit", "verify", "--redis", REDIS_URL, "--stream", stream]) == 0
        assert "ok (3 records" in capsys.readouterr().out
        client.xdel(stream, ids[0])
        assert main(["audit", "verify", "--redis", REDIS_URL, "--stream", stream]) == 1
        assert "removed: seq 1 missing before it" in capsys.readouterr().err
    finally:
        client.delete(stream)
        client.close()


def test_an_unreachable_redis_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert main(["audit", "verify", "--redis", url, "--stream", "s"]) == 2
    assert "cannot read" in capsys.readouterr().err
