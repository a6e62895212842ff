"""Session affinity on the simulator: prefix-cache hits and replica load, affinity against the rest.

    python -m bench.affinity [--sessions 200] [--turns 6] [--concurrency 32] [--no-doc]

For each balance mode it starts, as separate processes on 127.0.0.1, a fresh simulator with
four replicas (each its own prefix cache, with the timing model on) and the gateway (two
workers, so two processes that share no state) with one pool upstream over the four. Then
200 multi-turn agent sessions run, 32 at a time, each turn appending to its conversation:

- affinity (x-session-id): rendezvous hashing with bounded load on the client's session id;
- affinity (prompt family): the same, the key being the fingerprint of each conversation's
  opening, no header sent;
- round_robin and least_loaded: the other balance modes;
- ideal: one replica, so every turn finds every earlier turn of its session in the cache.

Figures: cache hit ratio (cached / prompt tokens, from the simulator's counters), requests
per replica (max/min), sessions served by one replica only, client latency. After the
header run, replica 0 is taken down and every session sends one more turn: the sessions
that moved are counted against those that lived on replica 0. Results go to
bench/results/affinity-*.json and, as the last section, to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness import DOC, HOST, RESULTS_DIR, Processes, free_port, git_revision, http, wait_http_ok
from gateway.keys import generate_key, hash_key

PREFILL_MS_PER_TOKEN = 0.02
DECODE_MS_PER_TOKEN = 0.5
REPLY_TOKENS = 8
REPLICAS = 4
MODES = ("affinity-header", "affinity-family", "round_robin", "least_loaded", "ideal", "affinity-hot")
DOC_START, DOC_END = "<!-- bench:affinity:start -->", "<!-- bench:affinity:end -->"


@dataclass
class Run:
    mode: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0


def start_simulator(procs: Processes, tmp: Path, replicas: int, label: str) -> tuple[Any, list[str]]:
    log = tmp / f"sim-{label}.log"
    argv = [sys.executable, "-m", "simulator", "--port", "0", "--replicas", str(replicas)]
    argv += ["--prefill-ms-per-token", str(PREFILL_MS_PER_TOKEN)]
    argv += ["--decode-ms-per-token", str(DECODE_MS_PER_TOKEN), "--default-reply-tokens", str(REPLY_TOKENS)]
    argv += ["--cache-blocks", "100000"]
    proc = procs.start(f"sim-{label}", argv, log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        urls = [line.split(": ", 1)[1] for line in log.read_text().splitlines() if "replica" in line]
        if len(urls) == replicas:
            wait_http_ok(urls[0] + "/health", proc, "the simulator", log)
            return proc, urls
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"the simulator did not start; see {log}")


def start_gateway(procs: Processes, tmp: Path, urls: list[str], balance: str, key_hash: str) -> str:
    port = free_port()
    pool: dict[str, Any] = {"kind": "openai_compat", "balance": balance}
    if len(urls) > 1:
        pool["replicas"] = [url + "/v1" for url in urls]
    else:
        pool["base_url"] = urls[0] + "/v1"
    config = {
        "server": {"host": HOST, "port": port, "workers": 2, "access_log": False},
        "upstreams": {"pool": pool},
        "models": {"agent": [{"upstream": "pool", "model": "sim-model"}]},
        "tenants": {"bench": {"models": ["*"]}},
        "keys": [{"tenant": "bench", "hash": key_hash}],
    }
    path = tmp / f"gateway-{balance}-{len(urls)}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = path.with_suffix(".log")
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path)]
    proc = procs.start(f"gateway-{balance}", argv, log)
    url = f"http://{HOST}:{port}"
    wait_http_ok(url + "/readyz", proc, "the gateway", log)
    return url


def opening(session: str) -> list[dict[str, str]]:
    rules = "Keep answers short; cite files by path; never invent APIs; run the tests after edits. " * 8
    return [{"role": "system", "content": f"You are coding agent {session}. {rules}"}]


async def session_turns(
    http_session: aiohttp.ClientSession,
    url: str,
    key: str,
    name: str,
    turns: range,
    header: bool,
    run: Run,
    history: dict[str, list[dict[str, str]]],
) -> None:
    messages = history.setdefault(name, opening(name))
    for turn in turns:
        # An agent's turn carries tool output: ~330 tokens appended per turn.
        messages.append({"role": "user", "content": f"Turn {turn} tool output: " + "a line of it; " * 90})
        headers = {"authorization": f"Bearer {key}", "x-request-id": f"{name}-{turn}"}
        if header:
            headers["x-session-id"] = name
        started = time.perf_counter()
        async with http_session.post(
            url + "/v1/chat/completions", json={"model": "agent", "messages": messages}, headers=headers
        ) as response:
            body = await response.json()
        run.latencies_ms.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            run.errors += 1
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"] or ""})


async def drive(
    url: str,
    key: str,
    names: list[str],
    turns: range,
    header: bool,
    concurrency: int,
    run: Run,
    history: dict[str, list[dict[str, str]]],
) -> None:
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http_session:

        async def one(name: str) -> None:
            async with gate:
                await session_turns(http_session, url, key, name, turns, header, run, history)

        await asyncio.gather(*(one(name) for name in names))


def replicas_by_session(sim_url: str) -> dict[str, list[int]]:
    status, body = http("GET", sim_url + "/_sim/requests", timeout=30)
    assert status == 200, body[:200]
    served: dict[str, list[int]] = {}
    for record in json.loads(body):
        request_id = record["headers"].get("x-request-id")
        if record["path"] == "/v1/chat/completions" and record["status"] == 200 and request_id:
            served.setdefault(request_id.rsplit("-", 1)[0], []).append(record["replica"])
    return served


def measure_mode(mode: str, args: argparse.Namespace, procs: Processes, tmp: Path) -> dict[str, Any]:
    replicas = 1 if mode == "ideal" else REPLICAS
    balance = mode if mode in ("round_robin", "least_loaded") else "affinity"
    _, sim_urls = start_simulator(procs, tmp, replicas, mode)
    key = generate_key()
    gateway = start_gateway(procs, tmp, sim_urls, balance, hash_key(key))
    names = [f"s{i:03d}x{uuid.uuid4().hex[:6]}" for i in range(args.sessions)]
    run = Run(mode)
    history: dict[str, list[dict[str, str]]] = {}
    hot = mode == "affinity-hot"
    if hot:  # every session opens the same way: one prompt family, one key, one replica until it spills
        shared = opening("shared")
        history = {name: list(shared) for name in names}
    header = mode not in ("affinity-family", "affinity-hot")
    concurrency = args.hot_concurrency if hot else args.concurrency
    started = time.perf_counter()
    asyncio.run(drive(gateway, key, names, range(args.turns), header, concurrency, run, history))
    elapsed = time.perf_counter() - started
    _, body = http("GET", sim_urls[0] + "/_sim/stats")
    stats = json.loads(body)["replicas"]
    served = replicas_by_session(sim_urls[0])
    result: dict[str, Any] = {
        "mode": mode,
        "requests": len(run.latencies_ms),
        "errors": run.errors,
        "seconds": round(elapsed, 2),
        "hit_ratio": sum(s["cached_tokens"] for s in stats) / max(1, sum(s["prompt_tokens"] for s in stats)),
        "replica_requests": [s["requests"] for s in stats],
        "one_replica_sessions": sum(1 for r in served.values() if len(set(r)) == 1),
        "latency_ms_p50": statistics.median(run.latencies_ms),
        "latency_ms_p95": statistics.quantiles(run.latencies_ms, n=20)[-1],
    }
    if mode == "affinity-header":
        # Replica 0 goes down: the simulator is controlled through another (they share their state).
        result["loss"] = lose_a_replica(sim_urls[-1], gateway, key, names, args, history, served)
    procs.stop_all()
    return result


def lose_a_replica(
    sim_url: str,
    gateway: str,
    key: str,
    names: list[str],
    args: argparse.Namespace,
    history: dict[str, list[dict[str, str]]],
    before: dict[str, list[int]],
) -> dict[str, int]:
    home = {name: Counter(before[name]).most_common(1)[0][0] for name in names}
    http("POST", sim_url + "/_sim/replicas/0/down")
    run = Run("loss")
    turn = range(args.turns, args.turns + 1)
    asyncio.run(drive(gateway, key, names, turn, True, args.concurrency, run, history))
    after = {name: replicas[-1] for name, replicas in replicas_by_session(sim_url).items()}
    moved = {name for name in names if after.get(name) != home[name]}
    lived_on_lost = {name for name in names if home[name] == 0}
    return {
        "sessions_on_lost_replica": len(lived_on_lost),
        "sessions_moved": len(moved),
        "moved_that_lived_elsewhere": len(moved - lived_on_lost),
        "errors": run.errors,
    }


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    ideal = next(r for r in results if r["mode"] == "ideal")["hit_ratio"]
    lines = [
        DOC_START,
        "## Affinity",
        "",
        f"- Command: `{meta['command']}`",
        f"- Date: {meta['date']} · git {meta['git']}",
        f"- Machine: {meta['machine']}",
        f"- Workload: {meta['sessions']} sessions x {meta['turns']} turns, "
        f"{meta['concurrency']} sessions at a time, each turn appending to its conversation "
        "(a distinct ~250-token system prompt per session, then ~330 tokens of tool output per turn); "
        f"simulator with {REPLICAS} replicas, prefill {PREFILL_MS_PER_TOKEN} ms per uncached prompt token, "
        f"decode {DECODE_MS_PER_TOKEN} ms per token, {REPLY_TOKENS}-token replies; gateway with 2 workers "
        "(two processes sharing no state).",
        "",
        "| mode | cache hit ratio | of ideal | requests per replica | max/min | sessions on one replica "
        "| p50 ms | p95 ms | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["mode"] == "affinity-hot":
            continue
        loads = r["replica_requests"]
        lines.append(
            f"| {r['mode']} | {r['hit_ratio']:.3f} | {r['hit_ratio'] / ideal:.0%} "
            f"| {' / '.join(map(str, loads))} "
            f"| {max(loads) / max(1, min(loads)):.2f} | {r['one_replica_sessions']} of {meta['sessions']} "
            f"| {r['latency_ms_p50']:.1f} | {r['latency_ms_p95']:.1f} | {r['errors']} |"
        )
    loss = next(r for r in results if r["mode"] == "affinity-header")["loss"]
    hot = next(r for r in results if r["mode"] == "affinity-hot")
    lines += [
        "",
        "*ideal* is one replica holding every session, so every turn finds its earlier turns cached; "
        "*of ideal* is each mode's hit ratio over it. *affinity-family* sends no session header: the key "
        "is the fingerprint of the conversation's opening. Round robin and least loaded are not at "
        f"1/{REPLICAS} of ideal because hits are partial: a turn that lands on a replica an earlier turn "
        "of its session used finds that turn's prefix (the system prompt and the turns up to it); the "
        "whole history hits only when the previous turn was on the same replica. The affinity rows' "
        "load spread (max/min requests) is the hash's variance over 200 sessions; bounded load acts "
        "on requests in flight, which stayed under the bound here.",
        "",
        f"Bounded load (*affinity-hot*: every session opens the same way, so all share one key, "
        f"{meta['hot_concurrency']} sessions at a time): requests per replica "
        f"{' / '.join(map(str, hot['replica_requests']))}, "
        f"p50 {hot['latency_ms_p50']:.1f} ms, p95 {hot['latency_ms_p95']:.1f} ms, {hot['errors']} errors: "
        "the preferred replica takes what it may (its bound: 1.25 x the average in flight, at least 16 "
        "per gateway process) and the rest spills, in each session's rendezvous order.",
        "",
        f"Losing a replica (affinity-header, replica 0 taken down, one more turn per session): "
        f"{loss['sessions_moved']} sessions moved, "
        f"{loss['sessions_on_lost_replica']} had lived on replica 0, "
        f"{loss['moved_that_lived_elsewhere']} moved that lived elsewhere; {loss['errors']} errors "
        "(a refused connection is retried on the session's next replica).",
        f"Raw: `{meta['raw']}`.",
        DOC_END,
    ]
    return "\n".join(lines) + "\n"


def write_doc(section: str) -> None:
    text = DOC.read_text()
    if DOC_START in text and DOC_END in text:
        head, rest = text.split(DOC_START, 1)
        text = head + section.rstrip("\n") + rest.split(DOC_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.affinity", description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--hot-concurrency", type=int, default=128, help="sessions at a time, hot mode")
    parser.add_argument("--no-doc", action="store_true", help="leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    procs = Processes()
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tollgate-affinity-") as tmp:
            for mode in MODES:
                results.append(measure_mode(mode, args, procs, Path(tmp)))
                print(json.dumps(results[-1]), flush=True)
    finally:
        procs.stop_all()
    stamp = dt.datetime.now(dt.UTC)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    raw = RESULTS_DIR / f"affinity-{stamp:%Y%m%dT%H%M%SZ}.json"
    meta = {
        "command": "python -m bench.affinity" + (" " + " ".join(argv or sys.argv[1:])).rstrip(),
        "date": f"{stamp:%Y-%m-%d %H:%M} UTC",
        "git": git_revision(),
        "machine": f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}",
        "sessions": args.sessions,
        "turns": args.turns,
        "concurrency": args.concurrency,
        "hot_concurrency": args.hot_concurrency,
        "raw": str(raw.relative_to(DOC.parent.parent)),
    }
    raw.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    section = render(results, meta)
    print(section)
    if not args.no_doc:
        write_doc(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
