"""Sync traffic keeps priority: a `tollgate jobs-worker` claims no job while a gateway process
beside it (`jobs.pull: false`) has an interactive request in flight, and runs it once that
request has ended (real processes, the real host load file); job requests waiting on the
upstream are bounded apart from the jobs running (`jobs.upstream_concurrency`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gateway.jobs.host_load import HostLoad
from simulator import SimConfig, Simulator
from tests.harness import chat_body, eventually, free_port
from tests.jobs.gateways import auth, jobs_config, poll_job
from tests.metering.processes import write_config
from tests.processes import GatewayProcess, Process, process_timeout
from tests.servers import UPSTREAM_KEY, running_gateway

HELD_S = 4.0  # how long the upstream holds the interactive request


def submit(http: httpx.Client, text: str, **extra: object) -> str:
    body = {"model": "chat", "messages": [{"role": "user", "content": text}], **extra}
    accepted = http.post("/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"})
    assert accepted.status_code == 202, accepted.text
    return str(accepted.headers["location"])


@process_timeout
def test_a_jobs_worker_waits_while_a_gateway_serves_an_interactive_request(tmp_path: Path) -> None:
    sim = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY))
    config = jobs_config(sim, tmp_path, jobs={"pull": False})
    path = write_config(
        tmp_path / "gateway.yaml", config.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    gateway = GatewayProcess(path, free_port(), 1, tmp_path / "gateway.log")
    worker: Process | None = None
    host = HostLoad(str(tmp_path / "jobs.db.load"), poll_s=0)  # read only, as a worker does
    try:
        # --nice rather than --idle: on a machine busy with other tests an idle-class worker may wait long
        args = [sys.executable, "-m", "gateway.cli", "jobs-worker", "--config", str(path), "--nice", "5"]
        worker = Process(args, tmp_path / "worker.log", lambda p: p.popen.poll() is None, "jobs worker")
        with (
            httpx.Client(base_url=gateway.url, timeout=60) as http,
            httpx.Client(base_url=gateway.url, timeout=60) as interactive,
            ThreadPoolExecutor(1) as pool,
        ):
            # The worker pulls: with no interactive request in flight, a job runs at once.
            assert poll_job(http, submit(http, "warm up"), auth(), seconds=60).status_code == 200

            x_sim = {"fault": {"kind": "slow_first_token", "delay_s": HELD_S}}
            held = pool.submit(
                interactive.post, "/v1/chat/completions", json=chat_body(x_sim=x_sim), headers=auth()
            )
            assert eventually(lambda: host.in_flight == 1), "the gateway did not publish its call"
            location = submit(http, "wait for the interactive request")
            watch_until = time.monotonic() + HELD_S / 3
            while time.monotonic() < watch_until:
                assert http.get(location, headers=auth()).json()["status"] == "queued"
                time.sleep(0.05)
            assert not held.done()  # all of that while the interactive request was in flight

            assert held.result(timeout=30).status_code == 200
            done = poll_job(http, location, auth(), seconds=60)
            assert done.status_code == 200 and done.json()["object"] == "chat.completion"
            assert host.in_flight == 0
    finally:
        host.close()
        if worker is not None:
            worker.kill(signal.SIGTERM)
        gateway.stop()
        sim.stop()


def test_job_requests_waiting_on_the_upstream_are_bounded_apart_from_the_jobs_running(
    tmp_path: Path,
) -> None:
    sim = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY))
    config = jobs_config(sim, tmp_path, jobs={"concurrency": 8, "upstream_concurrency": 1})
    slow = {"fault": {"kind": "slow_first_token", "delay_s": 1.5}}
    try:
        with running_gateway(config) as gateway, httpx.Client(base_url=gateway.url, timeout=30) as http:
            locations = [submit(http, f"slow job {i}", x_sim=slow) for i in range(3)]

            def sent() -> int:
                return sum(r.path.endswith("/chat/completions") for r in sim.requests)

            assert eventually(lambda: sent() >= 1), "no job reached the upstream"
            watch_until = time.monotonic() + 0.7  # within the first answer's 1.5 s
            while time.monotonic() < watch_until:
                assert sent() == 1  # the other two wait for the one upstream slot
                time.sleep(0.05)
            for location in locations:
                assert poll_job(http, location, auth(), seconds=30).status_code == 200
            assert sent() == 3
    finally:
        sim.stop()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_a_jobs_worker_with_idle_runs_at_the_lowest_cpu_priority() -> None:
    probe = (
        "import os; from gateway.jobs.worker import lower_priority;"
        "print(lower_priority(10, True), os.sched_getscheduler(0) == os.SCHED_IDLE)"
    )
    argv = [sys.executable, "-c", probe]
    shown = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.split() == ["SCHED_IDLE", "True"]
