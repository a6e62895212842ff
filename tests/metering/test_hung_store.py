"""A Redis that accepts connections but does not answer (a real redis-server, stopped with
SIGSTOP): the requests it makes the gateway refuse must hold no budget once it answers
again, though each of their reserves reaches it, late, after the refusal."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.state.redis import RedisStore
from gateway.metering.plan import Periods
from simulator import RunningSimulator
from tests.harness import openai_error
from tests.metering.processes import RedisProcess
from tests.metering.test_metering_http import hello, metered_config, post
from tests.processes import process_timeout
from tests.servers import running_gateway

pytestmark = [process_timeout, pytest.mark.usefixtures("one_budget_day")]


async def test_requests_refused_by_a_hung_redis_hold_no_budget_once_it_answers(
    upstream_sim: RunningSimulator, paced_sim: RunningSimulator, tmp_path: Path
) -> None:
    redis = RedisProcess(tmp_path)
    prefix = f"tghung-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis.url, prefix, timeout_s=10)
    usd = f"t:month:{Periods.of(datetime.now(UTC)).month}:usd"
    try:
        state = {"store": "redis", "redis_url": redis.url, "timeout_s": 0.5, "key_prefix": prefix}
        with running_gateway(metered_config(upstream_sim, paced_sim, state)) as gateway:
            assert post(gateway, "streamer", hello(max_tokens=20)).status_code == 200
            os.kill(redis.popen.pid, signal.SIGSTOP)
            try:
                refused = [post(gateway, "streamer", hello(max_tokens=20)) for _ in range(2)]
                refused += [post(gateway, "limited", hello(max_tokens=20)) for _ in range(3)]  # 3 a minute
            finally:
                os.kill(redis.popen.pid, signal.SIGCONT)
            for response in refused:
                assert openai_error(response, 503)["code"] == "state_store_unavailable"
            # Redis now runs what it was sent while stopped: the late reserves, and the
            # gateway's releases of them (retried in the background), in whichever order.
            # Well within the leases the late reserves would otherwise hold (30 s + 60 s).
            spent, give_up_at = 0, time.monotonic() + 30
            while time.monotonic() < give_up_at:
                rows = await store.spend(("streamer",), "2000-01-01", "2100-01-01")
                spent = sum(row.cost_micros for row in rows)
                opened = [await store.open_reservations(t) for t in ("streamer", "limited")]
                if opened == [0, 0] and spent:
                    break
                await asyncio.sleep(0.1)
            assert await store.open_reservations("streamer") == 0
            assert await store.open_reservations("limited") == 0
            assert await store.counters("streamer", (usd,)) == (spent,)  # the one served request only
            # Nor do they hold the requests-per-minute limit: its three are there to use.
            assert [post(gateway, "limited", hello(max_tokens=20)).status_code for _ in range(3)] == [200] * 3
    finally:
        await store.aclose()
        redis.kill()
