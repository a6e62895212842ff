"""The per-user cache of passed policy checks: a revision already checked is not checked
again, anything that could change the verdict is another entry, a refused revision is never
kept, and a cache that cannot be used only means checking again."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path

import orjson
import pytest

from adapters.policy.check import CheckReport, check_in_child
from adapters.policy.check_cache import CheckCache, check_with_cache
from adapters.policy.rego import RegoEngine
from adapters.policy.source import PolicySource, read_policy_dir
from gateway.config import CACHE_DIR_ENV, PolicyConfig, cache_dir_from_env
from tests.harness import captured_logs, free_port
from tests.policy.test_cli import write_config
from tests.processes import GatewayProcess, process_timeout

ENTRYPOINT = "gateway/authz/decision"
POLICY = """package gateway.authz

decision := {"allow": input.tenant in data.tenants, "reasons": []}
"""
TESTS = """package gateway.authz_test

import data.gateway.authz

test_a_known_tenant_is_allowed if authz.decision.allow with input.tenant as "demo"

test_an_unknown_tenant_is_denied if {
	d := authz.decision with input.tenant as "mallory"
	d.allow == false
}
"""


def small_policy(
    directory: Path, *, policy: str = POLICY, tests: str = TESTS, tenants: str = "[demo]"
) -> Path:
    """A policy whose check takes well under a second (the shipped one takes many)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "authz.rego").write_text(policy)
    (directory / "authz_test.rego").write_text(tests)
    (directory / "data.yaml").write_text(f"tenants: {tenants}\n")
    return directory


def entries(cache: CheckCache) -> list[Path]:
    return sorted(cache.directory.glob("*.json"))


def check(source: PolicySource, cache: CheckCache | None, entrypoint: str = ENTRYPOINT) -> CheckReport:
    return asyncio.run(check_with_cache(source, entrypoint, cache))


def test_a_second_check_of_the_same_source_is_the_cached_report(tmp_path: Path) -> None:
    cache = CheckCache(tmp_path / "cache" / "policy-checks")
    source = read_policy_dir(small_policy(tmp_path / "policies"))
    first = check(source, cache)
    assert first.ok and not first.cached
    assert first.tests == "2 passed, 0 failed"
    [entry] = entries(cache)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert cache.directory.stat().st_mode & 0o777 == 0o700
    assert cache.directory.parent.stat().st_mode & 0o777 == 0o700
    second = check(read_policy_dir(tmp_path / "policies"), cache)
    assert second.cached and second.ok
    assert (second.revision, second.tests) == (first.revision, first.tests)
    assert entries(cache) == [entry]


def test_a_cached_entry_is_answered_without_running_the_check(tmp_path: Path) -> None:
    """Evidence that a hit runs no child: an entry under a failing source's key (which no
    check would ever write) is what the check answers."""
    cache = CheckCache(tmp_path / "policy-checks")
    failing = read_policy_dir(small_policy(tmp_path / "p", tests=TESTS + "\ntest_fails if false\n"))
    assert not check(failing, None).ok
    cache.directory.mkdir(mode=0o700)
    key = cache.key(failing, ENTRYPOINT)
    (cache.directory / f"{key}.json").write_bytes(orjson.dumps({"key": key, "tests": "9 passed, 0 failed"}))
    report = check(failing, cache)
    assert report.ok and report.cached and report.tests == "9 passed, 0 failed"


def test_a_changed_module_data_or_entrypoint_is_another_entry(tmp_path: Path) -> None:
    cache = CheckCache(tmp_path / "policy-checks")
    directory = small_policy(tmp_path / "policies")
    source = read_policy_dir(directory)
    assert check(source, cache).ok
    assert cache.lookup(source, ENTRYPOINT) is not None
    assert cache.lookup(source, "gateway/authz/other") is None
    small_policy(directory, policy=POLICY + "\n# a comment is an edit too\n")
    assert cache.lookup(read_policy_dir(directory), ENTRYPOINT) is None
    small_policy(directory, tenants="[demo, other]")
    assert cache.lookup(read_policy_dir(directory), ENTRYPOINT) is None
    small_policy(directory, tests=TESTS.replace("mallory", "eve"))
    assert cache.lookup(read_policy_dir(directory), ENTRYPOINT) is None
    small_policy(directory)  # back as it was: the first entry again
    assert cache.lookup(read_policy_dir(directory), ENTRYPOINT) is not None


def test_a_refused_revision_is_never_cached(tmp_path: Path) -> None:
    cache = CheckCache(tmp_path / "policy-checks")
    source = read_policy_dir(small_policy(tmp_path / "p", tests=TESTS + "\ntest_fails if false\n"))
    for _ in range(2):
        report = check(source, cache)
        assert not report.ok and not report.cached
        assert "gateway.authz_test.test_fails" in (report.error or "")
        assert entries(cache) == []


def test_a_corrupt_entry_is_checked_again_and_replaced(tmp_path: Path) -> None:
    cache = CheckCache(tmp_path / "policy-checks")
    source = read_policy_dir(small_policy(tmp_path / "p"))
    assert check(source, cache).ok
    [entry] = entries(cache)
    for garbage in (b"{not json", b'{"key": "another"}', b'["a list"]', b""):
        entry.write_bytes(garbage)
        report = check(source, cache)
        assert report.ok and not report.cached
        assert check(source, cache).cached  # the check wrote the entry anew


def test_an_unwritable_cache_only_means_checking_again(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = CheckCache(blocker / "tollgate" / "policy-checks")
    source = read_policy_dir(small_policy(tmp_path / "p"))
    with captured_logs() as logs:
        for _ in range(2):
            report = check(source, cache)
            assert report.ok and not report.cached
    assert "the policy check cache cannot be written" in logs.getvalue()


def test_a_directory_others_may_write_is_not_used(tmp_path: Path) -> None:
    cache = CheckCache(tmp_path / "policy-checks")
    source = read_policy_dir(small_policy(tmp_path / "p"))
    assert check(source, cache).ok
    cache.directory.chmod(0o777)
    with captured_logs() as logs:
        report = check(source, cache)
    assert report.ok and not report.cached
    assert "the policy check cache is not used" in logs.getvalue()


def test_the_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert cache_dir_from_env() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir_from_env() == tmp_path / "xdg" / "tollgate"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/not/used")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir_from_env() == tmp_path / "home" / ".cache" / "tollgate"
    config = PolicyConfig(dir=str(tmp_path))
    found = CheckCache.for_config(config)
    assert (
        found is not None and found.directory == tmp_path / "home" / ".cache" / "tollgate" / "policy-checks"
    )
    assert CheckCache.for_config(config.model_copy(update={"check_cache": False})) is None


async def test_a_reload_to_a_revision_checked_before_takes_the_cached_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    directory = small_policy(tmp_path / "policies")
    edited = POLICY.replace("[]", '["checked"]')
    small_policy(tmp_path / "earlier", policy=edited)
    earlier = read_policy_dir(tmp_path / "earlier")
    assert (await check_with_cache(earlier, ENTRYPOINT, CheckCache(tmp_path / "cache" / "policy-checks"))).ok
    config = PolicyConfig(dir=str(directory), state_dir=str(tmp_path / "state"), reload_interval_s=0.05)
    engine = await RegoEngine.open(config)
    try:
        with captured_logs() as logs:
            small_policy(directory, policy=edited)
            for _ in range(400):
                if engine.revision == earlier.revision:
                    break
                await asyncio.sleep(0.05)
        assert engine.revision == earlier.revision
        checked = [orjson.loads(line) for line in logs.getvalue().splitlines() if "revision checked" in line]
        assert [(doc["revision"], doc["from_cache"]) for doc in checked] == [(earlier.revision, True)]
    finally:
        await engine.aclose()


@process_timeout
def test_serve_starts_when_the_cache_cannot_be_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_DIR_ENV, str(blocker / "cache"))
    config = write_config(tmp_path, str(small_policy(tmp_path / "policies")))
    gateway = GatewayProcess(config, free_port(), 1, tmp_path / "gateway.log")
    gateway.stop()


@process_timeout
def test_serve_fills_the_cache_and_a_restart_uses_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    directory = small_policy(tmp_path / "policies")
    config = write_config(tmp_path, str(directory))
    GatewayProcess(config, free_port(), 1, tmp_path / "first.log").stop()
    cache = CheckCache(tmp_path / "cache" / "policy-checks")
    [entry] = entries(cache)
    assert cache.lookup(read_policy_dir(directory), ENTRYPOINT) is not None
    written = entry.stat().st_mtime_ns
    GatewayProcess(config, free_port(), 1, tmp_path / "second.log").stop()
    assert entries(cache) == [entry] and entry.stat().st_mtime_ns == written


def _children() -> set[int]:
    """This process's living children (from /proc), zombies left out."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            stat = Path(f"/proc/{pid}/stat")
            if stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
                pids.add(int(pid))
    return pids


async def test_a_cancelled_check_ends_its_child_and_closes_its_pipes(tmp_path: Path) -> None:
    source = read_policy_dir(small_policy(tmp_path / "policies"))
    before = _children()
    task = asyncio.ensure_future(check_in_child(source, ENTRYPOINT))
    for _ in range(200):  # until the child is there (it takes a second or more to check)
        await asyncio.sleep(0.01)
        if _children() - before:
            break
    assert _children() - before, "the check's child never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _children() - before == set()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
