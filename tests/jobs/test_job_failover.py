"""A gateway process killed while it holds claimed jobs: another process, sharing the job
store and the state store, takes them over once their claims lapse, completes every one,
and none is charged twice. Real processes (`tollgate serve`), real SQLite files, the real
Redis and a real three-node Redis Cluster."""

from __future__ import annotations

import signal
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import eventually, free_port
from tests.jobs.gateways import auth, jobs_config, poll_job
from tests.metering.conftest import REDIS_URL
from tests.metering.processes import write_config
from tests.metering.redis_cluster import Cluster
from tests.processes import GatewayProcess, Process, process_timeout
from tests.servers import UPSTREAM_KEY

JOBS = 6


@pytest.fixture
def slow_sim() -> Iterator[RunningSimulator]:
    """Each answer takes a few seconds (0.4 s a token), so jobs are in flight when a process dies."""
    running = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, decode_s_per_token=0.4))
    yield running
    running.stop()


def ledger_micros(state_db: Path) -> int:
    """The tenant's spend in the ledger (0 before the store made its tables: nothing settled yet)."""
    with sqlite3.connect(state_db) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'ledger'").fetchone():
            return 0
        (total,) = db.execute(
            "SELECT COALESCE(SUM(cost_micros), 0) FROM ledger WHERE tenant = 'alpha'"
        ).fetchone()
    return int(total)


def attempts_of(store: str, tmp_path: Path, prefix: str, cluster: Cluster | None) -> list[int]:
    if store == "sqlite":
        with sqlite3.connect(tmp_path / "jobs.db") as db:
            return [row[0] for row in db.execute("SELECT attempts FROM jobs")]
    # On the cluster, the whole queue is on the node serving the hash tag {jobs}.
    client = cluster.client(cluster.owner("jobs")) if cluster else redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:{{jobs}}:job:*"))
        return [int(client.hget(key, "attempts") or 0) for key in keys]
    finally:
        client.close()


@process_timeout
@pytest.mark.parametrize("store", ["sqlite", "redis", "redis-cluster"])
def test_jobs_of_a_killed_process_are_completed_by_another_and_charged_once(
    request: pytest.FixtureRequest, tmp_path: Path, slow_sim: RunningSimulator, store: str, jobs_prefix: str
) -> None:
    jobs: dict[str, object] = {"visibility_s": 2}
    cluster: Cluster | None = None
    if store == "redis":
        jobs.update(store="redis", redis_url=REDIS_URL, key_prefix=jobs_prefix)
    elif store == "redis-cluster":
        cluster = request.getfixturevalue("cluster")
        jobs.update(store="redis", redis_url=cluster.url, redis_cluster=True, key_prefix=jobs_prefix)
    config = jobs_config(slow_sim, tmp_path, jobs=jobs)
    path = write_config(
        tmp_path / "gateway.yaml", config.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    first = GatewayProcess(path, free_port(), 1, tmp_path / "first.log")
    second: GatewayProcess | None = None
    try:
        with httpx.Client(base_url=first.url, timeout=30) as http:
            locations = []
            for i in range(JOBS):
                body = {
                    "model": "chat",
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": f"job {i}"}],
                }
                accepted = http.post(
                    "/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"}
                )
                assert accepted.status_code == 202, accepted.text
                locations.append(accepted.headers["location"])
        # Every job claimed and under way upstream, none answered yet: then the process dies.
        assert eventually(lambda: len(slow_sim.requests) >= JOBS, seconds=60)
        first.kill(signal.SIGKILL)
        assert ledger_micros(tmp_path / "state.db") == 0
        second = GatewayProcess(path, free_port(), 1, tmp_path / "second.log")
        with httpx.Client(base_url=second.url, timeout=30) as http:
            answers = [poll_job(http, location, auth(), seconds=120) for location in locations]
        assert [a.status_code for a in answers] == [200] * JOBS
        cost = 0
        for answer in answers:
            usage = answer.json()["usage"]
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            cost += (
                (usage["prompt_tokens"] - cached) * 1000 + cached * 100 + usage["completion_tokens"] * 2000
            )
        assert ledger_micros(tmp_path / "state.db") == cost
        attempts = attempts_of(store, tmp_path, jobs_prefix, cluster)
        assert len(attempts) == JOBS and all(a >= 2 for a in attempts)  # each was taken over
    finally:
        first.kill(signal.SIGKILL)
        if second is not None:
            second.stop()


@process_timeout
def test_a_gateway_that_only_accepts_jobs_and_a_jobs_worker_that_runs_them(tmp_path: Path) -> None:
    sim = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY))
    config = jobs_config(sim, tmp_path, jobs={"pull": False})
    path = write_config(
        tmp_path / "gateway.yaml", config.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    gateway = GatewayProcess(path, free_port(), 1, tmp_path / "gateway.log")
    worker: Process | None = None
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            body = {"model": "chat", "messages": [{"role": "user", "content": "run me elsewhere"}]}
            accepted = http.post(
                "/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"}
            )
            assert accepted.status_code == 202
            assert http.get(accepted.headers["location"], headers=auth()).json()["status"] == "queued"
            args = [sys.executable, "-m", "gateway.cli", "jobs-worker", "--config", str(path), "--nice", "5"]
            worker = Process(args, tmp_path / "worker.log", lambda p: p.popen.poll() is None, "jobs worker")
            done = poll_job(http, accepted.headers["location"], auth(), seconds=120)
        assert done.status_code == 200 and done.json()["object"] == "chat.completion"
    finally:
        if worker is not None:
            worker.kill(signal.SIGTERM)
        gateway.stop()
        sim.stop()
