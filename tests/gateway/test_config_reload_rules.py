"""What a config edit changes live and what waits for a restart (gateway/config_reload.py),
on real files: the reloader's decisions, apart from the server that applies them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

from gateway.config import GatewayConfig, load_config
from gateway.config_reload import LIVE, RESTART_ONLY, ConfigReloader, changed_settings, live_part
from gateway.keys import hash_key
from gateway.keys_file import append_key, key_entry
from tests.harness import captured_logs
from tests.processes import ROOT

KEY = hash_key("tg-test-rules")


def data(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "upstreams": {"local": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"chat": [{"upstream": "local", "model": "m"}]},
        "tenants": {"acme": {}},
        "keys": [{"tenant": "acme", "hash": KEY}],
    }
    return {**base, **extra}


class Applied:
    def __init__(self) -> None:
        self.configs: list[GatewayConfig] = []

    def __call__(self, config: GatewayConfig) -> None:
        self.configs.append(config)


def write(path: Path, content: dict[str, Any] | str) -> None:
    text = content if isinstance(content, str) else yaml.safe_dump(content)
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(path)


def reloader(tmp_path: Path, content: dict[str, Any]) -> tuple[ConfigReloader, Applied, Path]:
    path = tmp_path / "tollgate.yaml"
    write(path, content)
    applied = Applied()
    return ConfigReloader(path, load_config(path), applied, 1.0), applied, path


def lines(stream: Any) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


async def test_an_unchanged_file_changes_nothing_and_logs_nothing(tmp_path: Path) -> None:
    watcher, applied, _ = reloader(tmp_path, data())
    with captured_logs() as logs:
        await watcher.check_once()
        await watcher.check_once()
    assert applied.configs == [] and lines(logs) == []


async def test_a_valid_edit_is_applied_whole(tmp_path: Path) -> None:
    metered = {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    watcher, applied, path = reloader(tmp_path, data(state=metered))
    await watcher.check_once()
    edited = data(state=metered, tenants={"acme": {"rate_limits": {"requests_per_minute": 5}}, "beta": {}})
    edited["models"]["small"] = [{"upstream": "local", "model": "s"}]
    write(path, edited)
    with captured_logs() as logs:
        await watcher.check_once()
    [config] = applied.configs
    assert set(config.tenants) == {"acme", "beta"} and "small" in config.models
    assert config.tenants["acme"].rate_limits is not None
    [line] = lines(logs)
    assert line["msg"] == "config reloaded"
    assert line["changed"] == ["tenants.acme", "tenants.beta", "models.small"]
    assert watcher.counts.reloaded == 1


async def test_a_bad_edit_is_refused_once_naming_the_file_and_the_key(tmp_path: Path) -> None:
    watcher, applied, path = reloader(tmp_path, data())
    write(path, data(keys=[{"tenant": "nobody", "hash": KEY}]))
    with captured_logs() as logs:
        await watcher.check_once()
        await watcher.check_once()  # the same bad file: not refused twice
    [line] = lines(logs)
    assert line["level"] == "error" and line["file"] == str(path)
    assert "keys.0.tenant" in line["error"] or "keys[0].tenant" in line["error"]
    write(path, "tenants: [")
    with captured_logs() as logs:
        await watcher.check_once()
    [line] = lines(logs)
    assert "not valid YAML" in line["error"] and str(path) in line["error"]
    assert applied.configs == [] and watcher.counts.refused == 2
    write(path, data(tenants={"acme": {}, "beta": {}}))
    await watcher.check_once()
    assert [set(c.tenants) for c in applied.configs] == [{"acme", "beta"}]


async def test_turning_metering_on_waits_for_a_restart(tmp_path: Path) -> None:
    watcher, applied, path = reloader(tmp_path, data())
    write(path, data(tenants={"acme": {"budgets": [{"window": "day", "usd": 1}]}}))
    with captured_logs() as logs:
        await watcher.check_once()
    [line] = lines(logs)
    assert "turns metering on" in line["error"] and applied.configs == []


async def test_restart_only_settings_are_named_and_the_rest_applied(tmp_path: Path) -> None:
    watcher, applied, path = reloader(tmp_path, data())
    write(path, data(server={"port": 9999, "workers": 3}, tenants={"acme": {}, "beta": {}}))
    with captured_logs() as logs:
        await watcher.check_once()
    [reloaded, warning] = lines(logs)
    assert reloaded["changed"] == ["tenants.beta"]
    assert warning["restart_only"] == ["server.port", "server.workers"]
    [config] = applied.configs
    assert config.server.port == 8080 and "beta" in config.tenants  # the running server settings


def test_changed_settings_name_what_differs_one_level_down() -> None:
    before = GatewayConfig.model_validate(data())
    after = GatewayConfig.model_validate(data(state={"store": "sqlite"}, audit={"sink": "jsonl"}))
    assert changed_settings(before, after, ("state", "audit", "tenants")) == ["state", "audit"]
    assert changed_settings(before, before, ("state", "tenants")) == []


async def test_a_key_appended_to_the_keys_file_is_applied(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    write(keys, {"keys": []})
    watcher, applied, _ = reloader(tmp_path, data(keys_file="keys.yaml"))
    await watcher.check_once()
    append_key(keys, key_entry("acme", hash_key("tg-test-appended"), "new"))
    await watcher.check_once()
    [config] = applied.configs
    assert [k.label for k in config.keys] == ["", "new"]


def test_the_shipped_config_stands_as_its_own_live_part() -> None:
    shipped = load_config(ROOT / "tollgate.yaml")
    assert live_part(shipped, shipped) == shipped


def test_every_setting_is_either_live_or_restart_only() -> None:
    assert set(LIVE).isdisjoint(RESTART_ONLY)
    assert set(LIVE) | set(RESTART_ONLY) == set(GatewayConfig.model_fields)


async def test_a_change_to_what_runs_side_by_side_waits_for_a_restart(tmp_path: Path) -> None:
    watcher, applied, path = reloader(tmp_path, data())
    mirrored = data()
    mirrored["models"]["chat"].append({"upstream": "local", "model": "m2", "mirror": 5})
    write(path, mirrored)
    with captured_logs() as logs:
        await watcher.check_once()
    [line] = lines(logs)
    assert "side by side" in line["error"] and applied.configs == []
