"""Whether a Redis keeps budgets across its own restart: the gateway says so at start when
it does not (no append-only file), and stays quiet when it cannot tell."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from adapters.state import warn_if_not_durable
from adapters.state.redis import RedisStore
from tests.harness import free_port
from tests.metering.processes import RedisProcess
from tests.processes import process_timeout

pytestmark = process_timeout


async def durability_of(tmp_path: Path, *settings: str) -> str | None:
    redis = RedisProcess(tmp_path, None, *settings)
    store = RedisStore(redis.url, timeout_s=10)
    try:
        return await store.durability_problem()
    finally:
        await store.aclose()
        redis.kill()


async def test_a_redis_without_an_append_only_file_is_named_as_losing_budgets(tmp_path: Path) -> None:
    problem = await durability_of(tmp_path, "--appendonly", "no")
    assert problem is not None
    assert "appendonly yes" in problem and "127.0.0.1" in problem


async def test_a_redis_with_an_append_only_file_is_not(tmp_path: Path) -> None:
    assert await durability_of(tmp_path, "--appendonly", "yes", "--appendfsync", "everysec") is None


async def test_a_redis_refusing_info_cannot_be_judged_and_is_not(tmp_path: Path) -> None:
    assert await durability_of(tmp_path, "--appendonly", "no", "--rename-command", "INFO", "") is None


async def test_an_unreachable_redis_cannot_be_judged_and_is_not() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=1)
    try:
        assert await store.durability_problem() is None
    finally:
        await store.aclose()


async def test_the_warning_is_logged_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    redis = RedisProcess(tmp_path, None, "--appendonly", "no")
    store = RedisStore(redis.url, timeout_s=10)
    try:
        with caplog.at_level(logging.WARNING, logger="tollgate.state"):
            await warn_if_not_durable(store)
        assert any("appendonly" in record.getMessage() for record in caplog.records)
    finally:
        await store.aclose()
        redis.kill()
