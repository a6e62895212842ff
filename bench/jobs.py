"""Async jobs against the zero-latency simulator: does the queue drain fast, and does pulling
it leave interactive requests alone?

One gateway process (1 worker, jobs on, SQLite job store) in front of the simulator (zero
latency), both on 127.0.0.1. In one run:

1. *sync*: closed-loop synchronous load (`--connections`, default 32) for `--seconds`: the
   gateway's synchronous throughput;
2. *interactive alone*: an open-loop interactive load (`--rate` requests/s, default 20) for
   `--seconds`: its p50;
3. *drain*: a batch of `--jobs` lines (default 5,000) through the Batch API, timed from its
   creation until every line is done: the drain rate D; meanwhile the same interactive load
   runs again: its p50 under the drain;
4. *interactive alone* and *sync* again, in that order: S is the mean of the two sync
   phases, the p50 alone that of both interactive phases, so the machine's drift over the
   run weighs on both sides of each ratio.

Reported: D / S (target >= 0.70) and the interactive p50's change (target <= 10 %). With
`--probe-upstream`, the same open-loop load is also sent straight to the simulator, alone and
during the drain: how much of the interactive request's extra latency is the upstream's; with
`--probe-loop`, to the gateway's /healthz (no model call, so the pull gate does not see it):
how much is the gateway's event loop being busy when a request arrives.

    python -m bench.jobs [--jobs N] [--seconds S] [--connections C] [--rate R]
        [--job-worker [--nice N | --idle]] [--probe-upstream] [--probe-loop] [--no-doc]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.harness import (
    DOC,
    HOST,
    RESULTS_DIR,
    BenchError,
    Processes,
    free_port,
    git_revision,
    machine_lock,
    percentile,
    start_simulator,
    wait_http_ok,
)

KEY = "tg-bench-jobs-key-0123456789"
CHAT = "/v1/chat/completions"
SECTION = "## Async jobs: queue drain against sync throughput, and interactive latency"


def gateway_config(sim_port: int, tmp: Path, jobs: dict[str, Any]) -> dict[str, Any]:
    from gateway.keys import hash_key

    return {
        "server": {"host": HOST, "workers": 1, "access_log": False, "log_level": "warning"},
        "upstreams": {"sim": {"kind": "openai_compat", "base_url": f"http://{HOST}:{sim_port}/v1"}},
        "models": {"bench": [{"upstream": "sim", "model": "bench-model"}]},
        "tenants": {"bench": {"models": ["*"]}},
        "keys": [{"tenant": "bench", "hash": hash_key(KEY)}],
        "jobs": {"sqlite_path": str(tmp / "jobs.db"), **jobs},
    }


def body(i: int) -> dict[str, Any]:
    return {
        "model": "bench",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": f"bench request {i}"}],
    }


async def closed_loop(url: str, connections: int, seconds: float) -> float:
    """Requests per second with `connections` clients sending back to back."""
    done = 0
    headers = {"authorization": f"Bearer {KEY}"}
    stop = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession, n: int) -> None:
        nonlocal done
        i = 0
        while time.monotonic() < stop:
            async with session.post(url + CHAT, json=body(n * 1_000_000 + i), headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise BenchError(f"sync request failed: {response.status}")
            done += 1
            i += 1

    started = time.monotonic()
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session, n) for n in range(connections)))
    return done / (time.monotonic() - started)


async def interactive(
    url: str, rate: float, until: asyncio.Event | None, seconds: float, path: str = CHAT
) -> list[float]:
    """Open-loop requests at `rate` per second; each one's latency (s). An empty `url`: none.
    `path` other than the chat completions': a GET of it (the gateway's /healthz: its loop alone)."""
    if not url:
        return []
    headers = {"authorization": f"Bearer {KEY}"}
    latencies: list[float] = []
    tasks: list[asyncio.Task[None]] = []

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        started = time.perf_counter()
        if path == CHAT:
            request = session.post(url + CHAT, json=body(-i), headers=headers)
        else:
            request = session.get(url + path)
        async with request as response:
            await response.read()
        latencies.append(time.perf_counter() - started)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
        stop = time.monotonic() + seconds
        i = 0
        next_at = time.monotonic()
        while time.monotonic() < stop and not (until is not None and until.is_set()):
            tasks.append(asyncio.ensure_future(one(session, i)))
            i += 1
            next_at += 1 / rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*tasks)
    return latencies


async def drain(url: str, jobs: int, rate: float, max_s: float, probes: Probes) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {KEY}"}
    lines = b"\n".join(
        orjson.dumps({"custom_id": f"j{i}", "method": "POST", "url": CHAT, "body": body(i)})
        for i in range(jobs)
    )
    async with aiohttp.ClientSession() as session:
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", lines, filename="bench.jsonl", content_type="application/jsonl")
        upload_started = time.monotonic()
        async with session.post(url + "/v1/files", data=form, headers=headers) as response:
            uploaded = await response.json()
            if response.status != 200:
                raise BenchError(f"upload failed: {uploaded}")
        upload_s = time.monotonic() - upload_started
        creation = {"input_file_id": uploaded["id"], "endpoint": CHAT, "completion_window": "24h"}
        submit_started = time.monotonic()
        async with session.post(url + "/v1/batches", json=creation, headers=headers) as response:
            batch = await response.json()
            if response.status != 200:
                raise BenchError(f"batch creation failed: {batch}")
        started = time.monotonic()
        finished = asyncio.Event()
        load = asyncio.ensure_future(interactive(url, rate, finished, max_s))
        probing = asyncio.ensure_future(run_probes(probes, rate, finished, max_s))
        counts: dict[str, int] = {}
        try:
            while time.monotonic() - started < max_s:
                async with session.get(f"{url}/v1/batches/{batch['id']}", headers=headers) as response:
                    state = await response.json()
                counts = state["request_counts"]
                if state["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
            else:
                raise BenchError(f"the batch did not drain in {max_s:.0f}s: {counts}")
        finally:
            finished.set()
        drained_s = time.monotonic() - started
        latencies = await load
        probed = await probing
    return {
        "jobs": jobs,
        "upload_s": upload_s,
        "submit_s": started - submit_started,
        "drain_s": drained_s,
        "drain_rps": jobs / drained_s,
        "failed": counts.get("failed", 0),
        "interactive": latencies,
        "probed": probed,
    }


Probes = dict[str, tuple[str, str]]  # name -> (base URL, path): the same open-loop load elsewhere


async def run_probes(
    probes: Probes, rate: float, until: asyncio.Event | None, seconds: float
) -> dict[str, list[float]]:
    runs = [interactive(base, rate, until, seconds, path) for base, path in probes.values()]
    return dict(zip(probes, await asyncio.gather(*runs), strict=True))


async def measure(url: str, probes: Probes, args: argparse.Namespace) -> dict[str, Any]:
    await closed_loop(url, args.connections, 2.0)  # warm-up
    sync_before = await closed_loop(url, args.connections, args.seconds)
    alone, probed_alone = await asyncio.gather(
        interactive(url, args.rate, None, args.seconds), run_probes(probes, args.rate, None, args.seconds)
    )
    drained = await drain(url, args.jobs, args.rate, 600.0, probes)
    during, probed_during = drained.pop("interactive"), drained.pop("probed")
    again, probed_again = await asyncio.gather(  # the baseline again, after
        interactive(url, args.rate, None, args.seconds), run_probes(probes, args.rate, None, args.seconds)
    )
    # S before and after the drain, as the interactive baseline: the machine's drift over the run
    # weighs on both sides of D / S alike
    sync_after = await closed_loop(url, args.connections, args.seconds)
    sync_rps = (sync_before + sync_after) / 2
    p50_alone = percentile([*alone, *again], 50) * 1000
    p50_during = percentile(during, 50) * 1000
    upstream: dict[str, Any] = {}
    for name in probes:
        upstream[f"{name}_p50_alone_ms"] = percentile([*probed_alone[name], *probed_again[name]], 50) * 1000
        upstream[f"{name}_p50_during_ms"] = percentile(probed_during[name], 50) * 1000
    return {
        **upstream,
        "sync_rps": sync_rps,
        "sync_rps_before_after": [sync_before, sync_after],
        **drained,
        "drain_over_sync": drained["drain_rps"] / sync_rps,
        "interactive_p50_alone_ms": p50_alone,
        "interactive_p50_during_ms": p50_during,
        "interactive_p99_alone_ms": percentile([*alone, *again], 99) * 1000,
        "interactive_p99_during_ms": percentile(during, 99) * 1000,
        "interactive_samples": [len(alone) + len(again), len(during)],
        "p50_change": p50_during / p50_alone - 1,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    procs = Processes()
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-jobs-") as directory:
        tmp = Path(directory)
        try:
            _, sim_port = start_simulator(procs, tmp)
            port = free_port()
            jobs = json.loads(args.jobs_config) if args.jobs_config else {}
            if args.job_worker:
                jobs["pull"] = False  # the gateway accepts jobs; a niced jobs-worker process runs them
            config = tmp / "gateway.json"
            config.write_text(json.dumps(gateway_config(sim_port, tmp, jobs)))
            log = tmp / "gateway.log"
            argv = [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
            ]
            proc = procs.start("gateway", [*argv, "--workers", "1"], log)
            wait_http_ok(f"http://{HOST}:{port}/healthz", proc, "gateway", log)
            if args.job_worker:
                worker = [
                    sys.executable,
                    "-m",
                    "gateway.cli",
                    "jobs-worker",
                    "--config",
                    str(config),
                    *(["--idle"] if args.idle else ["--nice", str(args.nice)]),
                ]
                procs.start("jobs-worker", worker, tmp / "jobs-worker.log")
            probes: Probes = {}
            if args.probe_upstream:
                probes["upstream"] = (f"http://{HOST}:{sim_port}", CHAT)
            if args.probe_loop:
                probes["loop"] = (f"http://{HOST}:{port}", "/healthz")
            result = asyncio.run(measure(f"http://{HOST}:{port}", probes, args))
            result["jobs_config"] = jobs
            return result
        finally:
            procs.stop_all()


def render(result: dict[str, Any], command: str) -> str:
    r = result
    rows = [
        (
            f"synchronous throughput S (closed loop, c{r['connections']}; before, after the drain)",
            "{:.0f} req/s ({:.0f}, {:.0f})".format(r["sync_rps"], *r["sync_rps_before_after"]),
        ),
        (
            f"queue drain rate D ({r['jobs']:,} jobs, the interactive load running)",
            f"{r['drain_rps']:.0f} jobs/s ({r['drain_s']:.1f} s)",
        ),
        ("**D / S** (target >= 0.70)", f"**{r['drain_over_sync']:.2f}**"),
        (
            f"interactive p50 alone / during the drain ({r['rate']:g} req/s, open loop)",
            f"{r['interactive_p50_alone_ms']:.2f} / {r['interactive_p50_during_ms']:.2f} ms",
        ),
        ("**interactive p50 change** (target <= +10 %)", f"**{r['p50_change'] * 100:+.0f} %**"),
        (
            "interactive p99 alone / during",
            f"{r['interactive_p99_alone_ms']:.2f} / {r['interactive_p99_during_ms']:.2f} ms",
        ),
        ("file upload (every line through the upload's stages, then stored)", f"{r['upload_s']:.1f} s"),
        ("batch creation (every line's governance, then stored)", f"{r['submit_s']:.1f} s"),
    ]
    if "loop_p50_alone_ms" in r:
        rows.insert(
            6,
            (
                "the same load to the gateway's /healthz: p50 alone / during",
                f"{r['loop_p50_alone_ms']:.2f} / {r['loop_p50_during_ms']:.2f} ms",
            ),
        )
    if "upstream_p50_alone_ms" in r:
        rows.insert(
            6,
            (
                "the same load straight to the simulator: p50 alone / during",
                f"{r['upstream_p50_alone_ms']:.2f} / {r['upstream_p50_during_ms']:.2f} ms",
            ),
        )
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"""{SECTION}

Measured {time.strftime("%Y-%m-%d", time.gmtime())} at `{git_revision()}` on the shared 2-core machine (the
machine's bench lock held: no tests ran meanwhile, yet it stays noisy), so read same-run ratios.
Command: `{command}`. {_setup(r)}, the simulator in zero-latency mode (one process, one
event loop), all on 127.0.0.1; {r["jobs"]:,} queued requests, one batch through the Batch API.

| figure | value |
| --- | --- |
{table}
"""


def _setup(r: dict[str, Any]) -> str:
    overrides = {k: v for k, v in r["jobs_config"].items() if k != "pull"}
    settings = f", jobs settings `{json.dumps(overrides)}`" if overrides else ""
    if not r["job_worker"]:
        return f"One gateway process (1 worker, SQLite job store) running the jobs too{settings}"
    priority = "--idle" if r.get("idle") else f"--nice {r['nice']}"
    return (
        "One gateway process (1 worker, SQLite job store, `jobs.pull: false`) and one "
        f"`tollgate jobs-worker {priority}` process running the jobs{settings}"
    )


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    if SECTION in doc:
        start = doc.index(SECTION)
        # up to the next section, or the next benchmark's marked block, whichever comes first
        ends = [doc.find(mark, start + len(SECTION)) for mark in ("\n## ", "\n<!-- bench:")]
        end = min((e for e in ends if e != -1), default=-1)
        doc = doc[:start] + text + ("\n" + doc[end + 1 :] if end != -1 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--jobs-config", default="", help="JSON: overrides of the gateway's jobs block")
    parser.add_argument(
        "--job-worker", action="store_true", help="jobs run in a `tollgate jobs-worker` process"
    )
    parser.add_argument("--nice", type=int, default=10, help="the jobs worker's OS priority increment")
    parser.add_argument("--idle", action="store_true", help="the jobs worker at SCHED_IDLE, not --nice")
    parser.add_argument(
        "--probe-upstream",
        action="store_true",
        help="also send the interactive load straight to the simulator: the upstream's share of the latency",
    )
    parser.add_argument(
        "--probe-loop",
        action="store_true",
        help="also send the same load to the gateway's /healthz: the share of its event loop's queueing",
    )
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    with machine_lock():
        result = run(args)
    result.update(connections=args.connections, rate=args.rate, job_worker=args.job_worker)
    result.update(nice=args.nice, idle=args.idle)
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RESULTS_DIR / f"jobs-{stamp}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    if not args.no_doc:
        command = "python -m bench.jobs " + " ".join(sys.argv[1:])
        write_doc(render(result, command.strip()))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
