"""Config hot reload on a real `tollgate serve` with two workers: a valid edit is served by
every worker, a bad one is refused with a log line naming the file and the key while the
last good config keeps serving, and an edit of a restart-only setting says so."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import free_port, openai_upstream
from tests.metering.processes import GatewayProcess, write_config
from tests.processes import process_timeout

pytestmark = [pytest.mark.slow, process_timeout]

ACME_KEY = "tg-test-reload-acme"
BETA_KEY = "tg-test-reload-beta"
CHAT = {"max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}
WORKERS = 2


def base_config(sim: RunningSimulator, tmp_path: Path) -> dict[str, Any]:
    return {
        "server": {"access_log": False, "config_reload_interval_s": 0.2},
        "upstreams": {"local": openai_upstream(sim.openai_base_url(0))},
        "models": {"chat": [{"upstream": "local", "model": "sim-model"}]},
        "tenants": {"acme": {}},
        "keys": [{"tenant": "acme", "hash": hash_key(ACME_KEY)}],
        "state": {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")},
    }


def edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    partial = path.with_suffix(".partial")
    partial.write_text(yaml.safe_dump(data))
    partial.replace(path)  # one step, as editors and ConfigMaps do


def status(url: str, key: str, model: str = "chat") -> int:
    with httpx.Client(timeout=10) as client:  # a new connection: requests spread over the workers
        response = client.post(
            url + "/v1/chat/completions",
            json={"model": model, **CHAT},
            headers={"authorization": f"Bearer {key}"},
        )
    return response.status_code


def eventually_everywhere(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    """`check` holds twenty times in a row (on new connections: every worker), within `seconds`."""
    deadline = time.monotonic() + seconds
    streak = 0
    while streak < 20:
        if time.monotonic() > deadline:
            return False
        streak = streak + 1 if check() else 0
    return True


def log_lines(log: Path, message: str, count: int, seconds: float = 20.0) -> list[dict[str, Any]]:
    """The log's JSON lines with `message`, once there are `count` of them (one per worker)."""
    deadline = time.monotonic() + seconds
    while True:
        found = []
        for line in log.read_bytes().splitlines():
            if line.startswith(b"{"):
                entry = orjson.loads(line)
                if entry.get("msg") == message:
                    found.append(entry)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def edits_counted(url: str, outcome: str, seconds: float = 30.0) -> float:
    """tollgate_config_edits_total of `outcome` on /metrics (every worker's, summed), once it
    is there."""
    series = f'tollgate_config_edits_total{{tollgate_outcome="{outcome}"}} '
    deadline = time.monotonic() + seconds
    while True:
        lines = [line for line in httpx.get(url + "/metrics").text.splitlines() if line.startswith(series)]
        value = float(lines[0].split()[1]) if lines else 0.0
        if value >= WORKERS or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.fixture
def served(upstream_sim: RunningSimulator, tmp_path: Path) -> Iterator[tuple[GatewayProcess, Path]]:
    config = write_config(tmp_path / "tollgate.yaml", base_config(upstream_sim, tmp_path))
    gateway = GatewayProcess(config, free_port(), WORKERS, tmp_path / "gw.log")
    try:
        yield gateway, config
    finally:
        gateway.stop()


def test_an_edit_is_served_and_a_bad_one_refused_while_the_last_good_config_serves(
    served: tuple[GatewayProcess, Path], tmp_path: Path
) -> None:
    gateway, config = served
    assert status(gateway.url, ACME_KEY) == 200
    assert status(gateway.url, BETA_KEY) == 401

    def add_beta(data: dict[str, Any]) -> None:
        data["tenants"]["beta"] = {"models": ["second"], "rate_limits": {"requests_per_minute": 1000}}
        data["keys"].append({"tenant": "beta", "hash": hash_key(BETA_KEY)})
        data["models"]["second"] = [{"upstream": "local", "model": "sim-model"}]

    edit(config, add_beta)
    assert eventually_everywhere(lambda: status(gateway.url, BETA_KEY, "second") == 200)
    assert status(gateway.url, BETA_KEY, "chat") == 404  # beta's models, as edited
    assert len(log_lines(gateway.log, "config reloaded", WORKERS)) == WORKERS

    def break_budget(data: dict[str, Any]) -> None:
        data["tenants"]["beta"]["budgets"] = [{"window": "week", "usd": 5}]
        data["keys"] = data["keys"][:1]  # would drop beta's key, if it were taken

    edit(config, break_budget)
    refused = log_lines(gateway.log, "config edit refused; the last good config keeps serving", WORKERS)
    assert len(refused) == WORKERS
    assert refused[0]["level"] == "error"
    assert refused[0]["file"] == str(config)
    assert "tenants.beta.budgets.0.window" in refused[0]["error"]
    assert str(config) in refused[0]["error"]
    # The last good config keeps serving: beta's key still works, on every worker.
    assert eventually_everywhere(lambda: status(gateway.url, BETA_KEY, "second") == 200, seconds=60)
    assert edits_counted(gateway.url, "refused") == WORKERS  # for the alert
    assert edits_counted(gateway.url, "applied") == WORKERS


def test_an_edit_of_a_restart_only_setting_is_logged_and_the_rest_applied(
    served: tuple[GatewayProcess, Path],
) -> None:
    gateway, config = served

    def move_and_add(data: dict[str, Any]) -> None:
        data["server"]["port"] = free_port()
        data["keys"].append({"tenant": "acme", "hash": hash_key(BETA_KEY)})

    edit(config, move_and_add)
    [warning, *_] = log_lines(
        gateway.log,
        "config edit touches restart-only settings; they take effect at the next restart "
        "(the running values keep serving)",
        WORKERS,
    )
    assert warning["restart_only"] == ["server.port"]
    assert warning["applied"] == ["keys"]
    assert eventually_everywhere(lambda: status(gateway.url, BETA_KEY) == 200)  # on the old port


def test_upstreams_are_added_changed_and_removed_live(
    served: tuple[GatewayProcess, Path], upstream_sim: RunningSimulator
) -> None:
    gateway, config = served
    dead = f"http://127.0.0.1:{free_port()}/v1"

    def add_other(data: dict[str, Any]) -> None:
        data["upstreams"]["other"] = openai_upstream(upstream_sim.openai_base_url(1))
        data["models"]["other"] = [{"upstream": "other", "model": "sim-model"}]

    edit(config, add_other)
    assert eventually_everywhere(lambda: status(gateway.url, ACME_KEY, "other") == 200)
    assert "other" in httpx.get(gateway.url + "/readyz").json()["upstreams"]

    def break_local(data: dict[str, Any]) -> None:
        data["upstreams"]["local"] = openai_upstream(dead, retries=0)

    edit(config, break_local)  # the same name, another server: rebuilt
    assert eventually_everywhere(lambda: status(gateway.url, ACME_KEY) == 503)
    assert status(gateway.url, ACME_KEY, "other") == 200  # an upstream the edit left alone

    def restore_and_drop_other(data: dict[str, Any]) -> None:
        data["upstreams"]["local"] = openai_upstream(upstream_sim.openai_base_url(0))
        del data["upstreams"]["other"]
        del data["models"]["other"]

    edit(config, restore_and_drop_other)
    assert eventually_everywhere(lambda: status(gateway.url, ACME_KEY) == 200)
    assert status(gateway.url, ACME_KEY, "other") == 404
    assert "other" not in httpx.get(gateway.url + "/readyz").json()["upstreams"]


def test_an_alias_naming_a_missing_upstream_is_refused(served: tuple[GatewayProcess, Path]) -> None:
    gateway, config = served

    def dangling(data: dict[str, Any]) -> None:
        data["models"]["other"] = [{"upstream": "nowhere", "model": "sim-model"}]

    edit(config, dangling)
    [refused, *_] = log_lines(gateway.log, "config edit refused; the last good config keeps serving", WORKERS)
    assert "models" in refused["error"] and "nowhere" in refused["error"]
    assert status(gateway.url, ACME_KEY, "other") == 404
    assert status(gateway.url, ACME_KEY) == 200


def test_an_edited_rate_limit_is_enforced_by_every_worker(served: tuple[GatewayProcess, Path]) -> None:
    gateway, config = served
    assert status(gateway.url, ACME_KEY) == 200

    def limit(data: dict[str, Any]) -> None:
        data["tenants"]["acme"]["rate_limits"] = {"requests_per_minute": 2}

    edit(config, limit)
    assert len(log_lines(gateway.log, "config reloaded", WORKERS)) == WORKERS
    codes = [status(gateway.url, ACME_KEY) for _ in range(4)]
    assert codes.count(200) == 2 and codes.count(429) == 2  # one limit, counted in the shared store


def test_operator_tokens_change_live(upstream_sim: RunningSimulator, tmp_path: Path) -> None:
    old, new = "tg-admin-reload-old", "tg-admin-reload-new"
    data = {**base_config(upstream_sim, tmp_path), "admin": {"tokens": [hash_key(old)]}, "live_keys": {}}
    config = write_config(tmp_path / "tollgate.yaml", data)
    gateway = GatewayProcess(config, free_port(), WORKERS, tmp_path / "gw.log")
    try:

        def listing(token: str) -> int:
            with httpx.Client(timeout=10) as client:
                return client.get(
                    gateway.url + "/admin/keys", headers={"authorization": f"Bearer {token}"}
                ).status_code

        assert listing(old) == 200
        edit(config, lambda d: d.update(admin={"tokens": [hash_key(new)]}))
        assert eventually_everywhere(lambda: listing(old) == 401 and listing(new) == 200)
        assert eventually_everywhere(
            lambda: (
                httpx.get(
                    gateway.url + "/admin/spend", headers={"authorization": f"Bearer {new}"}
                ).status_code
                == 200
            )
        )
    finally:
        gateway.stop()
