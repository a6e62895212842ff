"""`tollgate sessions list|show`, against the store a config names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from adapters.state.sqlite import SQLiteStore
from gateway.cli import main
from gateway.sessions.records import SessionUpdate
from gateway.stages.admit import scoped_session_key
from tests.harness import free_port


def update(tenant: str, session_id: str, tokens: int) -> SessionUpdate:
    return SessionUpdate(
        tenant,
        scoped_session_key(tenant, session_id),
        1,
        tokens,
        0,
        10,
        2000,
        "chat",
        "local",
        0,
        "",
        ("d1",),
        8,
        600,
    )


async def seed(path: Path) -> None:
    store = SQLiteStore(path)
    try:
        await store.update_session(update("acme", "small", 100))
        await store.update_session(update("acme", "large", 9000))
        await store.update_session(update("other", "theirs", 50))
    finally:
        await store.aclose()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    asyncio.run(seed(tmp_path / "state.db"))
    path = tmp_path / "tollgate.yaml"
    data = {
        "upstreams": {"u": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"chat": [{"upstream": "u", "model": "m"}]},
        "tenants": {"acme": {}, "other": {}},
        "state": {"sqlite_path": str(tmp_path / "state.db")},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_sessions_list_ranks_a_tenants_sessions(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["sessions", "list", "--config", str(config), "--tenant", "acme", "--sort", "tokens", "--json"]
    )
    assert code == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["usage"]["input_tokens"] for r in listed] == [9000, 100]
    assert main(["sessions", "list", "--config", str(config)]) == 0
    table = capsys.readouterr().out
    assert table.count("\n") == 4  # the header and three sessions
    assert scoped_session_key("other", "theirs") in table


def test_sessions_show_finds_a_session_by_the_id_its_client_sent(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "show", "large", "--tenant", "acme", "--config", str(config)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["session_key"] == scoped_session_key("acme", "large")
    assert shown["decision_ids"] == ["d1"]
    assert main(["sessions", "show", "theirs", "--tenant", "acme", "--config", str(config)]) == 1
    assert "no such session" in capsys.readouterr().err


def test_sessions_commands_refuse_a_state_file_that_is_not_there(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Run from elsewhere, a relative sqlite_path names no file: an error, not an empty answer
    # from a database the command itself would have created.
    data = yaml.safe_load(config.read_text())
    data["state"]["sqlite_path"] = str(tmp_path / "elsewhere" / "state.db")
    config.write_text(yaml.safe_dump(data))
    for argv in (["sessions", "list"], ["sessions", "show", "large", "--tenant", "acme"], ["spend"]):
        assert main([*argv, "--config", str(config)]) == 2
        assert "no state database at" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists()


def test_sessions_commands_name_a_tenant_the_config_does_not_have(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "show", "large", "--tenant", "nobody", "--config", str(config)]) == 2
    assert "no tenant 'nobody'" in capsys.readouterr().err
    assert main(["sessions", "list", "--tenant", "nobody", "--config", str(config)]) == 2
    assert "no tenant 'nobody'" in capsys.readouterr().err


def test_sessions_commands_say_what_failed_when_redis_cannot_be_reached(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The store's error as a command reads it: what failed, not what it means for a request.
    data = yaml.safe_load(config.read_text())
    data["state"] = {"store": "redis", "redis_url": f"redis://127.0.0.1:{free_port()}/0"}
    config.write_text(yaml.safe_dump(data))
    for argv in (["sessions", "list"], ["sessions", "show", "large", "--tenant", "acme"], ["spend"]):
        assert main([*argv, "--config", str(config)]) == 1
        err = capsys.readouterr().err
        assert "the state store (Redis at 127.0.0.1:" in err
        assert "unreachable or failed (" in err
        assert "request" not in err
