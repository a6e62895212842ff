"""Hot reload: an edit is served without a restart; a broken edit (syntax, v0, a crash of
the engine, failing tests) is refused, logged and counted, and the last good revision keeps
serving; all of it under concurrent load with no failed request."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from adapters.policy.rego import RegoEngine
from adapters.policy.source import PolicyLoadError
from gateway.policy.cache import DecisionCache
from gateway.policy.decision import parse_decision
from simulator import RunningSimulator
from tests.harness import chat_body, eventually
from tests.policy.conftest import policy_config
from tests.policy.gateway_setup import TENANTS, policy_gateway_config, write_policy_dir
from tests.policy.golden import input_doc
from tests.servers import TEST_KEY, running_gateway

WAIT_S = 60.0  # a reload runs the policy's tests in a child process: seconds, not milliseconds

BROKEN_EDITS = {
    "a syntax error": ("authz.rego", "\nbroken if {\n", "this is unclosed"),
    "Rego v0 syntax": ("authz.rego", "\nallow_v0 { true }\n", "Rego v0"),
    "a builtin the embedded engine cannot run": (
        "extra.rego",
        'package extra\nx if net.cidr_contains("10.0.0.0/8", "10.0.0.1")\n',
        "evaluates as undefined",
    ),
    "a module that crashes the engine": (
        "extra.rego",
        'package extra\nf if count(input.l) == 1\ng if { f with input as {"l": [1]} }\n',
        "crashed while checking the policy",
    ),
    "failing tests": ("authz_test.rego", "\ntest_that_fails if { false }\n", "test_that_fails"),
}


async def until(predicate: Callable[[], bool], seconds: float = WAIT_S) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the reload"
        await asyncio.sleep(0.05)


def set_models(directory: Path, tenant: str, models: list[str]) -> None:
    data_file = directory / "data.yaml"
    data = yaml.safe_load(data_file.read_text())
    data["tenants"][tenant]["models"] = models
    data_file.write_text(yaml.safe_dump(data, sort_keys=False))


def append(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text((path.read_text() if path.exists() else "") + text)


@pytest.fixture
async def engine(policy_dir: Path) -> AsyncIterator[RegoEngine]:
    engine = await RegoEngine.open(policy_config(dir=str(policy_dir), reload_interval_s=0.05))
    yield engine
    await engine.aclose()


async def allowed(engine: RegoEngine, **overrides: object) -> bool:
    result = await engine.evaluate(input_doc(**overrides))
    return parse_decision(result.value).allow


async def test_an_edit_is_served_without_a_restart(engine: RegoEngine, policy_dir: Path) -> None:
    first = engine.revision
    assert await allowed(engine, model="kimi-k2.7-code")
    set_models(policy_dir, "demo", ["kimi-k2.6", "embeddings"])
    await until(lambda: engine.revision != first)
    assert not await allowed(engine, model="kimi-k2.7-code")
    assert engine.reload_counts.reloaded == 1 and engine.reload_counts.refused == 0


@pytest.mark.parametrize(("file", "text", "why"), list(BROKEN_EDITS.values()), ids=list(BROKEN_EDITS))
async def test_a_broken_edit_is_refused_and_the_last_good_revision_keeps_serving(
    engine: RegoEngine, policy_dir: Path, caplog: pytest.LogCaptureFixture, file: str, text: str, why: str
) -> None:
    first = engine.revision
    with caplog.at_level(logging.ERROR, logger="tollgate.policy"):
        append(policy_dir, file, text)
        await until(lambda: engine.reload_counts.refused == 1)
    assert engine.revision == first
    assert why in (engine.reload_counts.last_error or "")
    assert await allowed(engine)
    [line] = [
        r for r in caplog.records if r.message == "policy edit refused; the last good revision keeps serving"
    ]
    assert why in line.__dict__["why"] and line.__dict__["serving_revision"] == first


async def test_a_refused_edit_fixed_later_is_served(engine: RegoEngine, policy_dir: Path) -> None:
    original = (policy_dir / "authz.rego").read_text()
    append(policy_dir, "authz.rego", "\nbroken if {\n")
    await until(lambda: engine.reload_counts.refused == 1)
    (policy_dir / "authz.rego").write_text(original + "\nextra_rule := 1\n")
    first = engine.revision
    await until(lambda: engine.revision != first)
    assert engine.reload_counts.reloaded == 1


async def test_a_reload_empties_the_decision_cache(engine: RegoEngine, policy_dir: Path) -> None:
    cache = DecisionCache(10)
    result = await engine.evaluate(input_doc())
    cache.put(result.revision, b"key", parse_decision(result.value), result.value)
    append(policy_dir, "authz.rego", "\nextra_rule := 1\n")
    first = engine.revision
    await until(lambda: engine.revision != first)
    assert cache.get(engine.revision, b"key") is None


async def test_a_missing_policy_directory_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError, match="does not exist"):
        await RegoEngine.open(policy_config(dir=str(tmp_path / "nope")))


async def test_a_policy_that_does_not_compile_stops_the_start(policy_dir: Path) -> None:
    append(policy_dir, "authz.rego", "\nallow_v0 { true }\n")
    with pytest.raises(PolicyLoadError, match="Rego v0"):
        await RegoEngine.open(policy_config(dir=str(policy_dir)))


class Load:
    """Clients sending requests in threads until stopped (bounded in time), counting outcomes."""

    def __init__(self, url: str, models: list[str], threads: int = 4, max_s: float = 240) -> None:
        self.statuses: dict[str, Counter[int]] = {m: Counter() for m in models}
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_s
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(url, models), daemon=True) for _ in range(threads)
        ]

    def _run(self, url: str, models: list[str]) -> None:
        with httpx.Client(
            base_url=url, headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30
        ) as client:
            while not self._stop.is_set() and time.monotonic() < self._deadline:
                for model in models:
                    status = client.post("/v1/chat/completions", json=chat_body(model)).status_code
                    with self._lock:
                        self.statuses[model][status] += 1

    def count(self, model: str, status: int) -> int:
        with self._lock:
            return self.statuses[model][status]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


@pytest.fixture
def load_gateway(tmp_path: Path, upstream_sim: RunningSimulator) -> Iterator[tuple[str, Path]]:
    directory = write_policy_dir(tmp_path / "policies")
    config = policy_gateway_config(upstream_sim, {"dir": str(directory), "reload_interval_s": 0.1})
    with running_gateway(config) as gateway:
        yield gateway.url, directory


@pytest.mark.slow
def test_edits_under_concurrent_load_fail_no_request(
    load_gateway: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    url, directory = load_gateway
    caplog.set_level(logging.ERROR, logger="tollgate.policy")
    with Load(url, ["chat", "failover"]) as load:
        assert eventually(lambda: load.count("failover", 200) > 0, WAIT_S)
        # A good edit: failover is no longer alpha's.
        set_models(directory, "alpha", [m for m in TENANTS["alpha"]["models"] if m != "failover"])
        assert eventually(lambda: load.count("failover", 403) > 0, WAIT_S)
        # Broken edits, one after the other: each refused, the edited revision keeps serving.
        for file, text, why in (BROKEN_EDITS["a syntax error"], BROKEN_EDITS["failing tests"]):
            original = (directory / file).read_text()
            refused = _refusals(caplog)
            append(directory, file, text)
            assert eventually(lambda: _refusals(caplog) > refused, WAIT_S), why  # noqa: B023
            (directory / file).write_text(original)
        served_after = load.count("chat", 200)
        assert eventually(lambda: load.count("chat", 200) > served_after + 20, WAIT_S)
    assert set(load.statuses["chat"]) == {200}, load.statuses
    assert set(load.statuses["failover"]) == {200, 403}, load.statuses
    assert sum(load.statuses["chat"].values()) > 50


def _refusals(caplog: pytest.LogCaptureFixture) -> int:
    return sum(
        r.message == "policy edit refused; the last good revision keeps serving" for r in caplog.records
    )
