"""Routing by task class and priority, splits and mirrors: what they cost per request.

    python -m bench.routing [--quick] [--requests 1000] [--rounds 3] [--no-doc]

- stages: the label and route stages called directly in a tight loop (CPU time per request):
  an alias served as configured (no labels, no decision) against a request with x-workflow
  and x-priority, a policy decision that moves it to another alias and class, and a 90/10
  split choosing its arm; also the mirror stage for a request it does not copy.
- gateway: as separate processes on 127.0.0.1, the simulator (two replicas, its timing
  model on: a few milliseconds a request) and three gateways (one worker each, so each CPU
  figure is one process's), one with a 20 % mirror to replica 1 on its alias, one without,
  one with a 0.01 % mirror (the control), loaded at the same time (6 connections each) so
  all see the same machine: the shadow
  healthy, then slow (its first token 0.5 s late), then failing (500). Figures: the
  primary's latency p50 and p95, each gateway's CPU per request, and the shadow calls per
  primary call (the simulator's own counters).

The machine is shared: figures are ratios within the run. Results go to
bench/results/routing-*.json and the "Routing" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness import (
    HOST,
    Processes,
    cpu_seconds,
    free_port,
    http,
    met,
    percentile,
    process_tree,
    run_meta,
    save_results,
    update_doc,
    wait_http_ok,
)
from gateway.exchange import Candidate, Endpoint, Exchange, Principal, Tenant
from gateway.keys import generate_key, hash_key
from gateway.metering.prices import PriceBook
from gateway.policy.decision import Decision, RouteRules
from gateway.routing.mirror import Mirror, Shadow
from gateway.stages.label import Label
from gateway.stages.route import Route

TARGET_ADDED_US = 20.0  # 0.02 ms of CPU per request for routing by policy, split and labels
TARGET_P50_PCT = 5.0  # a slow or failing shadow moves the primary's p50 by at most this
PREFILL_MS_PER_TOKEN = 0.02
DECODE_MS_PER_TOKEN = 0.5
REPLY_TOKENS = 8
CONCURRENCY = 18  # six connections for each of the three gateways


# --- the stages, in process -------------------------------------------------------------


def _exchange(headers: dict[str, str], decision: Decision | None, n: int) -> Exchange:
    exchange = Exchange(f"req-{n}", Endpoint.CHAT, 0.0, 1e9, headers, b"")
    exchange.principal = Principal(Tenant("acme"), "k-0123456789ab", "ci")
    exchange.model_alias = "chat"
    exchange.body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    exchange.decision = decision
    exchange.session_key = f"{n:032x}"
    return exchange


def _loop_us(calls: int, run: Any) -> float:
    """CPU microseconds per call of `run(i)` (an awaitable), over `calls` calls."""

    async def body() -> float:
        start = time.thread_time()
        for i in range(calls):
            await run(i)
        return (time.thread_time() - start) / calls * 1e6

    return asyncio.run(body())


def stage_costs(calls: int) -> dict[str, float]:
    routes = {
        "chat": [Candidate("workers-ai", "@cf/moonshotai/kimi-k2.6", "frontier")],
        "economy": [
            Candidate("workers-ai", "@cf/meta/llama-3.1-8b-instruct-fp8", "economy", weight=90),
            Candidate("gpu-pool", "llama-3.1-8b", "economy", weight=10),
        ],
    }
    route = Route(routes)
    label = Label(["extraction", "chat", "reasoning"])
    plain = [_exchange({}, None, n) for n in range(calls)]
    moved = Decision(
        allow=True, route=RouteRules(("workers-ai", "gpu-pool"), model_class="economy", alias="economy")
    )
    labelled_headers = {"x-workflow": "extraction", "x-priority": "normal"}
    routed = [_exchange(labelled_headers, moved, n) for n in range(calls)]
    mirror = Mirror(
        {"chat": [Shadow(Candidate("gpu-pool", "kimi-k2.6"), 0.0001)]},
        frozenset({"chat"}),
        {},
        PriceBook({}),
        max_in_flight=8,
        timeout_s=1,
    )

    async def as_configured(i: int) -> None:
        exchange = plain[i]
        exchange.candidates = []
        await route(exchange)

    async def labelled_policy_split(i: int) -> None:
        exchange = routed[i]
        exchange.candidates = []
        await label(exchange)
        await route(exchange)

    async def mirror_not_copied(i: int) -> None:
        await mirror(plain[i])

    figures: dict[str, float] = {}
    for name, run in (
        ("route, as configured", as_configured),
        ("label + route (policy alias and class, 90/10 split)", labelled_policy_split),
        ("mirror stage, request not copied", mirror_not_copied),
    ):
        figures[name] = statistics.median(_loop_us(calls, run) for _ in range(5))
    assert routed[0].candidates and routed[0].routed_alias == "economy"
    return figures


# --- the gateway, end to end ------------------------------------------------------------


def start_simulator(procs: Processes, tmp: Path) -> list[str]:
    log = tmp / "sim.log"
    argv = [sys.executable, "-m", "simulator", "--port", "0", "--replicas", "2"]
    argv += ["--prefill-ms-per-token", str(PREFILL_MS_PER_TOKEN)]
    argv += ["--decode-ms-per-token", str(DECODE_MS_PER_TOKEN), "--default-reply-tokens", str(REPLY_TOKENS)]
    proc = procs.start("sim", argv, log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        urls = [line.split(": ", 1)[1] for line in log.read_text().splitlines() if "replica" in line]
        if len(urls) == 2:
            wait_http_ok(urls[0] + "/health", proc, "the simulator", log)
            return urls
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"the simulator did not start; see {log}")


def start_gateway(
    procs: Processes, tmp: Path, urls: list[str], mirror: float | None, key_hash: str
) -> tuple[str, int]:
    port = free_port()
    candidates: list[dict[str, Any]] = [{"upstream": "current", "model": "k26-current"}]
    if mirror is not None:
        candidates.append({"upstream": "candidate", "model": "k26-candidate", "mirror": mirror})
    config = {
        "server": {"host": HOST, "port": port, "workers": 1, "access_log": False},
        "upstreams": {
            "current": {"kind": "openai_compat", "base_url": urls[0] + "/v1"},
            "candidate": {"kind": "openai_compat", "base_url": urls[1] + "/v1", "retries": 0},
        },
        "models": {"kimi": candidates},
        "tenants": {"bench": {"models": ["*"]}},
        "keys": [{"tenant": "bench", "hash": key_hash}],
        "routing": {"mirror": {"max_in_flight": 64, "timeout_s": 5}},
    }
    name = f"mirror-{mirror}" if mirror is not None else "plain"
    path = tmp / f"gateway-{name}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = path.with_suffix(".log")
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path)]
    proc = procs.start(f"gateway-{name}", argv, log)
    url = f"http://{HOST}:{port}"
    wait_http_ok(url + "/readyz", proc, "the gateway", log)
    return url, proc.pid


def sim_counts(sim_url: str) -> list[int]:
    stats = json.loads(http("GET", sim_url + "/_sim/stats")[1])
    return [int(replica["requests"]) for replica in stats["replicas"]]


async def load(url: str, key: str, requests: int, label: str, concurrency: int) -> list[float]:
    latencies: list[float] = []
    queue = list(range(requests))
    body = {"model": "kimi", "messages": [{"role": "user", "content": "hello"}], "max_tokens": REPLY_TOKENS}

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            n = queue.pop()
            started = time.perf_counter()
            async with session.post(
                url + "/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {key}", "x-request-id": f"{label}-{n}"},
            ) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{label}: the gateway answered {response.status}")
            latencies.append((time.perf_counter() - started) * 1000)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return latencies


def _cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(p) or 0.0 for p in pids)


def paired_run(
    gateways: dict[str, tuple[str, int]], sim_url: str, key: str, requests: int, label: str
) -> dict[str, dict[str, Any]]:
    """The gateways loaded at once, a share of the connections each: the same machine, the same moment."""
    half = CONCURRENCY // len(gateways)

    async def both(n: int, tag: str) -> list[list[float]]:
        return list(
            await asyncio.gather(
                *(load(url, key, n, f"{label}-{tag}-{name}", half) for name, (url, _) in gateways.items())
            )
        )

    asyncio.run(both(CONCURRENCY * 4, "warm"))
    time.sleep(0.5)  # shadow calls of the warm-up end
    trees = {name: process_tree(pid) for name, (_, pid) in gateways.items()}
    before_cpu = {name: _cpu(pids) for name, pids in trees.items()}
    before = sim_counts(sim_url)
    results = asyncio.run(both(requests, "load"))
    cpu = {name: _cpu(pids) - before_cpu[name] for name, pids in trees.items()}
    deadline = time.monotonic() + 10  # shadow calls still running reach the simulator
    after = sim_counts(sim_url)
    while time.monotonic() < deadline and after[1] - before[1] < 0.2 * requests * 0.9:
        time.sleep(0.2)
        after = sim_counts(sim_url)
    found: dict[str, dict[str, Any]] = {}
    for (name, _), latencies in zip(gateways.items(), results, strict=True):
        found[name] = {
            "requests": requests,
            "p50_ms": statistics.median(latencies),
            "p95_ms": percentile(latencies, 95),
            "cpu_ms_per_request": cpu[name] / requests * 1000,
        }
    found["mirrored"]["shadow_calls"] = after[1] - before[1]
    found["mirrored"]["primary_calls"] = requests
    return found


def set_fault(sim_url: str, fault: dict[str, Any] | None) -> None:
    if fault is None:
        http("DELETE", sim_url + "/_sim/faults")
    else:
        http("POST", sim_url + "/_sim/faults", json.dumps({"fault": fault, "replica": 1}).encode())


SHADOWS: tuple[tuple[str, dict[str, Any] | None], ...] = (
    ("healthy", None),
    ("slow (first token +0.5 s)", {"kind": "slow_first_token", "delay_s": 0.5}),
    ("failing (500)", {"status": 500}),
)


def gateway_figures(requests: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Per shadow state, `rounds` paired runs; medians of the rounds (CPU: over all rounds)."""
    key = generate_key()
    procs = Processes()
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tollgate-bench-routing-") as tmp:
            urls = start_simulator(procs, Path(tmp))
            sim_url = urls[0]
            gateways = {
                "plain": start_gateway(procs, Path(tmp), urls, None, hash_key(key)),
                "control": start_gateway(procs, Path(tmp), urls, 0.01, hash_key(key)),
                "mirrored": start_gateway(procs, Path(tmp), urls, 20, hash_key(key)),
            }
            for round_ in range(rounds):
                for name, fault in SHADOWS:
                    set_fault(sim_url, fault)
                    label = f"r{round_}-{name[:4]}"
                    runs.setdefault(name, []).append(paired_run(gateways, sim_url, key, requests, label))
                    set_fault(sim_url, None)
    finally:
        procs.stop_all()
    return {name: _combined(found) for name, found in runs.items()}


def _combined(runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    def cpu(side: str) -> float:
        return float(sum(r[side]["cpu_ms_per_request"] for r in runs)) / len(runs)

    return {
        "requests": sum(r["plain"]["requests"] for r in runs),
        "p50_plain_ms": statistics.median(r["plain"]["p50_ms"] for r in runs),
        "p50_mirrored_ms": statistics.median(r["mirrored"]["p50_ms"] for r in runs),
        "p50_change_pct": statistics.median(
            (r["mirrored"]["p50_ms"] / r["plain"]["p50_ms"] - 1) * 100 for r in runs
        ),
        "p50_control_change_pct": statistics.median(
            (r["control"]["p50_ms"] / r["plain"]["p50_ms"] - 1) * 100 for r in runs
        ),
        "cpu_control_ms": cpu("control"),
        "p95_plain_ms": statistics.median(r["plain"]["p95_ms"] for r in runs),
        "p95_mirrored_ms": statistics.median(r["mirrored"]["p95_ms"] for r in runs),
        # CPU over all rounds together: the clock-tick resolution of /proc is 10 ms
        "cpu_plain_ms": cpu("plain"),
        "cpu_mirrored_ms": cpu("mirrored"),
        "primary_calls": sum(r["mirrored"]["primary_calls"] for r in runs),
        "shadow_calls": sum(r["mirrored"]["shadow_calls"] for r in runs),
        "rounds": runs,
    }


# --- report ------------------------------------------------------------------------------


def report(meta: dict[str, str], stages: dict[str, float], gateway: dict[str, dict[str, Any]]) -> str:
    base = stages["route, as configured"]
    rounds = len(gateway["healthy"]["rounds"])
    added = stages["label + route (policy alias and class, 90/10 split)"] - base
    lines = [
        "## Routing",
        "",
        f"- Command: `python -m bench.routing{meta['args']}` · {meta['date']} · git {meta['git']}",
        "- Machine: 2-core VM shared with other work (other tests and benchmarks were",
        "  running): read the ratios within this run, not the absolute figures.",
        "",
        "The stages in process (CPU time per request, median of 5 loops):",
        "",
        "| stage | CPU per request |",
        "|---|---|",
        *(f"| {name} | {us:.2f} µs |" for name, us in stages.items()),
        "",
        f"Routing by policy, a split and labels add **{added:.2f} µs** of CPU per request against an alias "
        f"served as configured (target <= {TARGET_ADDED_US:.0f} µs: {met(added <= TARGET_ADDED_US)}). "
        "The two labels also go into the policy input, which a cached decision serializes either way.",
        "",
        "End to end: three gateways (1 worker each) loaded at the same time, "
        f"{CONCURRENCY // 3} connections each, in",
        "front of the simulator (a few ms a request): one whose alias has a 20 % mirror to the",
        "simulator's replica 1, one without a mirror, and a control whose mirror takes 0.01 % (the",
        "mirror's stage and records on every request, next to no shadow call): what the control",
        f"differs by is this machine's noise. {rounds} rounds per shadow state, medians of the rounds",
        "(CPU: the mean of the rounds).",
        "",
        "| shadow | primary p50: no mirror / mirror | p50 change (control) | p95: no mirror / mirror "
        "| gateway CPU per request: no mirror / control / mirror | shadow calls per primary |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in gateway.items():
        share = run["shadow_calls"] / max(1, run["primary_calls"])
        lines.append(
            f"| {name} | {run['p50_plain_ms']:.1f} / {run['p50_mirrored_ms']:.1f} ms "
            f"| {run['p50_change_pct']:+.1f} % ({run['p50_control_change_pct']:+.1f} %) "
            f"| {run['p95_plain_ms']:.1f} / {run['p95_mirrored_ms']:.1f} ms "
            f"| {run['cpu_plain_ms']:.3f} / {run['cpu_control_ms']:.3f} / {run['cpu_mirrored_ms']:.3f} ms "
            f"| {share:.3f} |"
        )
    healthy = gateway["healthy"]
    share = healthy["shadow_calls"] / max(1, healthy["primary_calls"])
    cpu_ratio = healthy["cpu_mirrored_ms"] / healthy["cpu_plain_ms"]
    worst_p50 = max(abs(run["p50_change_pct"]) for run in gateway.values())
    noise = max(abs(run["p50_control_change_pct"]) for run in gateway.values())
    lines += [
        "",
        f"- Upstream work: the healthy mirror sent {share * 100:.1f} shadow calls per 100 primary calls "
        f"(its share, 20, at most: {met(share <= 0.205)}). The mirrored gateway's CPU per request was "
        f"{cpu_ratio:.2f}x the unmirrored one's: a shadow call costs the gateway up to about what a",
        "  whole request does (an upstream call is most of a request's CPU, and a shadow call is a",
        "  call of its own, not batched with others). The slow shadow's calls are fewer when",
        "  `max_in_flight` (64) skips mirrors while that many wait.",
        f"- The primary's p50 moved by at most {worst_p50:.1f} % with the shadow healthy, slow or failing "
        f"(target <= {TARGET_P50_PCT:.0f} %: {met(worst_p50 <= TARGET_P50_PCT)}); the control moved by up to "
        f"{noise:.1f} %. The copy is sent once the primary has finished, in a task",
        "  of its own that the primary never waits for; what remains is the CPU the shadow calls take",
        "  in the same event loop, which other requests of that worker wait behind.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small runs: a smoke test")
    parser.add_argument("--requests", type=int, default=1000, help="requests per gateway run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the four gateway runs")
    parser.add_argument("--no-doc", action="store_true", help="leave docs/benchmarks.md alone")
    parser.add_argument("--render", metavar="JSON", help="only redo the docs section from a saved run")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        update_doc("routing", report(saved["meta"], saved["stages_us"], saved["gateway"]))
        return 0
    meta = run_meta(argv)
    calls = 2_000 if args.quick else 20_000
    stages = stage_costs(calls)
    gateway = gateway_figures(200 if args.quick else args.requests, 1 if args.quick else args.rounds)
    markdown = report(meta, stages, gateway)
    path = save_results("routing", {"meta": meta, "stages_us": stages, "gateway": gateway})
    print(markdown)
    print(f"\nraw results: {path}")
    if not args.no_doc and not args.quick:
        update_doc("routing", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
