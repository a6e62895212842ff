"""What metering costs: reserve + settle + rate limits per request, and gateway throughput.

    python -m bench.metering [--quick] [--no-gateway] [--no-doc]

- store: one request's metering, as the meter stage and the settle finisher make it: a
  reserve taking two rate limits (requests and tokens per minute) and two hard budgets
  (dollars a day, tokens a month), then a settle with a ledger row and a tokens refund.
  Against the local Redis (127.0.0.1:6379, a key prefix of its own, deleted afterwards) and
  a SQLite file; one request at a time (latency), and 64 at once (what a loaded worker
  does: Redis calls share pipelines). Wall time and this process's CPU, per request.
- gateway: wrk at c64 against one gateway (2 workers, access log on) in front of nginx,
  without a state store, then with the Redis store and a tenant with budgets and rate
  limits, then the same on SQLite, then the whole pipeline: the Redis store and the same
  tenant, the shipped policy (`policies/`, the tenant added to its data) with redaction masking
  requests and responses, the decision log (a JSONL file) and metrics, and that whole pipeline
  again on SQLite; rounds alternate, medians.

Results go to bench/results/metering-*.json and the "Metering" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
import yaml

from adapters.state.redis import RedisStore
from adapters.state.sqlite import SQLiteStore
from bench import harness as spine
from gateway.keys import generate_key, hash_key
from gateway.metering.records import BudgetCharge, LedgerEntry, RateCharge, ReserveRequest, Settlement
from gateway.ports import StateStore

REDIS_URL = "redis://127.0.0.1:6379/0"
FAR = 4_102_444_800  # counters of the benchmark outlive it
TARGET_MS = 0.3
TARGET_RPS = 3000


def one_request(tenant: str) -> tuple[ReserveRequest, Settlement]:
    rid = uuid.uuid4().hex
    rates = (RateCharge("t:rpm", 1, 10**9), RateCharge("t:tpm", 4200, 10**12))
    budgets = (
        BudgetCharge("t:day:2026-11-22:usd", 16_900, 10**15, True, FAR),
        BudgetCharge("t:month:2026-11:tok", 4200, 10**15, True, FAR),
    )
    reserve = ReserveRequest(tenant, rid, budgets, rates, 60.0)
    ledger = LedgerEntry("2026-11-22", "key0", "bench-model", 100, 60, 40, 300)
    settle = Settlement(
        tenant,
        rid,
        (("t:day:2026-11-22:usd", 300, FAR), ("t:month:2026-11:tok", 140, FAR)),
        (RateCharge("t:tpm", 4060, 10**12),),
        ledger,
        900,
    )
    return reserve, settle


async def meter_once(store: StateStore, tenant: str) -> None:
    reserve, settle = one_request(tenant)
    outcome = await store.reserve(reserve)
    if not outcome.admitted:
        raise spine.BenchError("a benchmark reservation was refused")
    await store.settle(settle)


async def store_figures(store: StateStore, n: int, concurrency: int) -> dict[str, float]:
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    for _ in range(200):  # warm-up: connections, scripts, SQLite pages
        await meter_once(store, tenant)
    samples: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        started = time.perf_counter()
        await meter_once(store, tenant)
        samples.append(time.perf_counter() - started)
    seq_wall, seq_cpu = time.perf_counter() - wall0, time.process_time() - cpu0

    async def worker(count: int) -> None:
        for _ in range(count):
            await meter_once(store, tenant)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(n // concurrency) for _ in range(concurrency)))
    done = (n // concurrency) * concurrency
    par_wall, par_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    samples.sort()
    return {
        "sequential_p50_ms": 1000 * statistics.median(samples),
        "sequential_p99_ms": 1000 * samples[int(0.99 * (len(samples) - 1))],
        "sequential_mean_ms": 1000 * seq_wall / n,
        "sequential_cpu_ms": 1000 * seq_cpu / n,
        "concurrent_wall_ms": 1000 * par_wall / done,
        "concurrent_cpu_ms": 1000 * par_cpu / done,
        "concurrency": concurrency,
        "n": n,
    }


async def all_store_figures(n: int) -> dict[str, Any]:
    prefix = f"tgbench-{uuid.uuid4().hex[:8]}"
    results: dict[str, Any] = {}
    store: StateStore = RedisStore(REDIS_URL, prefix)
    try:
        results["redis"] = await store_figures(store, n, 64)
    finally:
        await store.aclose()
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-metering-") as tmp:
        store = SQLiteStore(Path(tmp) / "state.db")
        try:
            results["sqlite"] = await store_figures(store, n // 2, 64)
        finally:
            await store.aclose()
    return results


def policy_dir(tmp: Path) -> Path:
    """The shipped policy, with the benchmark's tenant in its data: every model, and masking
    of requests and responses for the shipped entity kinds."""
    shipped = spine.ROOT / "policies"
    directory = tmp / "policies"
    directory.mkdir()
    for rego in shipped.glob("*.rego"):
        (directory / rego.name).write_text(rego.read_text())
    data = yaml.safe_load((shipped / "data.yaml").read_text())
    data["tenants"]["bench"] = {
        "models": ["*"],
        "redact": {"request": "mask", "response": "mask", "entities": ["EMAIL", "CREDIT_CARD", "API_KEY"]},
    }
    (directory / "data.yaml").write_text(yaml.safe_dump(data))
    return directory


def gateway_config(
    stack: spine.Stack, port: int, key_hash: str, state: dict[str, Any] | None, policy: Path | None = None
) -> dict[str, Any]:
    tenant: dict[str, Any] = {"models": ["*"]}
    if state is not None:
        tenant["budgets"] = [{"window": "day", "usd": 1e6}, {"window": "month", "tokens": 10**12}]
        tenant["rate_limits"] = {"requests_per_minute": 10**9, "tokens_per_minute": 10**12}
    config: dict[str, Any] = {
        "server": {"host": spine.HOST, "port": port, "workers": 2, "access_log": True},
        "upstreams": {
            "fast": {"kind": "openai_compat", "base_url": f"http://{spine.HOST}:{stack.fast_port}/v1"}
        },
        "models": {spine.MODEL_ALIAS: [{"upstream": "fast", "model": "bench-upstream-model"}]},
        "tenants": {"bench": tenant},
        "keys": [{"tenant": "bench", "hash": key_hash}],
        "prices": {"bench-upstream-model": {"input": 0.95, "cached_input": 0.16, "output": 4.0}},
    }
    if state is not None:
        config["state"] = state
    if policy is not None:  # the shipped config's: a policy, and its decision log
        config["policy"] = {"dir": str(policy)}
        config["audit"] = {"sink": "jsonl", "path": str(policy.parent / f"audit-{port}.jsonl")}
    return config


def start_gateway(
    stack: spine.Stack, name: str, key_hash: str, state: dict[str, Any] | None, policy: Path | None = None
) -> None:
    spine.serve_gateway(stack, name, lambda port: gateway_config(stack, port, key_hash, state, policy))


def gateway_figures(rounds: int, seconds: float) -> dict[str, Any]:
    procs = spine.Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-metering-"))
    key = generate_key()
    prefix = f"tgbench-{uuid.uuid4().hex[:8]}"
    redis_state = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": prefix}
    sqlite_state = {"store": "sqlite", "sqlite_path": str(tmp / "state.db")}
    policy = policy_dir(tmp)
    variants: dict[str, tuple[dict[str, Any] | None, Path | None]] = {
        "off": (None, None),
        "redis": (redis_state, None),
        "sqlite": (sqlite_state, None),
        "everything": (redis_state, policy),
        "everything_sqlite": (sqlite_state, policy),
    }
    try:
        stack = spine.start_stack(procs, tmp, "auto", 1)
        script = spine.write_wrk_script(dataclasses.replace(stack, api_key=key))
        starts = {
            name: functools.partial(start_gateway, stack, name, hash_key(key), state, policy)
            for name, (state, policy) in variants.items()
        }
        return spine.alternating_gateways(stack, starts, script, rounds, seconds)
    finally:
        procs.stop_all()
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


def section(meta: dict[str, Any], s: dict[str, Any], g: dict[str, Any] | None) -> str:
    r, q = s["redis"], s["sqlite"]
    lines = [
        "## Metering",
        "",
        f"- Command: `python -m bench.metering{meta['args']}` · {meta['date']} · git {meta['git']}",
        "- Machine: 2-core VM shared with other work (Redis, the benchmark and, for the gateway rows,",
        "  wrk, nginx and the gateway all on it); medians.",
        "- One request's metering = a reserve (requests and tokens per minute, a dollar and a token",
        "  budget, all in one atomic call) + a settle (actual spend, ledger row, tokens refund).",
        "",
        "| figure | Redis | SQLite | target | met |",
        "|---|---|---|---|---|",
        f"| reserve + settle, one request at a time, p50 (wall) | {r['sequential_p50_ms']:.3f} ms "
        f"| {q['sequential_p50_ms']:.3f} ms | <= {TARGET_MS} ms (Redis) "
        f"| {spine.met(r['sequential_p50_ms'] <= TARGET_MS)} |",
        f"| the same, p99 (wall) | {r['sequential_p99_ms']:.3f} ms | {q['sequential_p99_ms']:.3f} ms | | |",
        f"| the same, gateway-side CPU | {r['sequential_cpu_ms']:.3f} ms "
        f"| {q['sequential_cpu_ms']:.3f} ms | | |",
        f"| 64 at once: wall per request (pipelined) | {r['concurrent_wall_ms']:.3f} ms "
        f"| {q['concurrent_wall_ms']:.3f} ms | <= {TARGET_MS} ms (Redis) "
        f"| {spine.met(r['concurrent_wall_ms'] <= TARGET_MS)} |",
        f"| 64 at once: gateway-side CPU per request | {r['concurrent_cpu_ms']:.3f} ms "
        f"| {q['concurrent_cpu_ms']:.3f} ms | | |",
    ]
    if g is not None:
        rps, cpu = g["rps"], g["cpu_ms_per_request"]
        lines += [
            "",
            f"Through the gateway (2 workers, access log on, upstream {g['upstream']}), wrk c64:",
            "",
            "| state store | RPS at c64 | gateway CPU per request | target | met |",
            "|---|---|---|---|---|",
            f"| none (metering off) | {rps['off']:,.0f} | {cpu['off']:.3f} ms | | |",
            f"| Redis, tenant with budgets and rate limits | {rps['redis']:,.0f} | {cpu['redis']:.3f} ms "
            f"| >= {TARGET_RPS:,} | {spine.met(rps['redis'] >= TARGET_RPS)} |",
            f"| SQLite, the same tenant | {rps['sqlite']:,.0f} | {cpu['sqlite']:.3f} ms "
            f"| >= {TARGET_RPS:,} | {spine.met(rps['sqlite'] >= TARGET_RPS)} |",
        ]
        if "everything" in rps:
            lines.append(
                f"| the whole pipeline: Redis as above, the shipped policy, redaction masking both ways, "
                f"the decision log, metrics | {rps['everything']:,.0f} | {cpu['everything']:.3f} ms "
                f"| >= {TARGET_RPS:,} | {spine.met(rps['everything'] >= TARGET_RPS)} |"
            )
        if "everything_sqlite" in rps:
            lines.append(
                f"| the whole pipeline on SQLite (the embedded default) | {rps['everything_sqlite']:,.0f} "
                f"| {cpu['everything_sqlite']:.3f} ms | >= {TARGET_RPS:,} "
                f"| {spine.met(rps['everything_sqlite'] >= TARGET_RPS)} |"
            )
    lines += [
        "",
        "Reading: one request at a time, each Redis call is a loopback round trip, and on this VM",
        "waking redis-server is most of it; only the reserve is on the request's path (the settle",
        "runs after the response is sent). That p50 is wall time, so it follows the machine's speed",
        "more than any other figure here: runs of the same code on one day give 0.25 to 0.45 ms.",
        "Under load, calls made while others are in flight share one write (Redis,",
        "`adapters/state/redis_wire.py`) or one transaction (SQLite, group commit), which is the",
        "cost a busy gateway pays: the 64-at-once rows. In the gateway rows metering",
        "costs more CPU than the store calls alone: the meter stage and the settle (estimates, plan,",
        "rate-limit headers, ledger row) and two more socket writes and reads per request; Redis's",
        "own CPU (its two scripts a request, about 0.06 ms between them) shares the same two cores.",
        "SQLite's row pays for two worker processes taking turns at one file's write lock. SQLite's",
        "p99 was 8-16 ms while the write-ahead log was checkpointed inside the COMMIT that crossed",
        "1,000 pages (every page copied back and both files synced, the write lock held); a thread",
        "of the store's own now checkpoints it (`adapters/state/sqlite_checkpoint.py`). The",
        "whole-pipeline row adds to the Redis row the policy decision (cached), request and response",
        "redaction, the decision log and its completion record: what the shipped config turns on,",
        "with Redis in place of SQLite; the last row is the same on SQLite, as the shipped config",
        "has it. On a busy event loop (py-spy, Redis whole pipeline) the pipeline's stages share",
        "the time out thinly: meter 9.5 %, redaction both ways 7 %, settle 5 %, decide 4.5 %,",
        "metrics 3 %, access line 2 %, decision log 2 % (and its writer thread); the spine (the",
        "upstream client, socket writes) is the rest. No stage is large enough to buy back the",
        "distance to the target alone.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metering")
    parser.add_argument("--quick", action="store_true", help="fewer requests, 1 round of 5 s")
    parser.add_argument("--no-gateway", action="store_true", help="store figures only")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    stores = asyncio.run(all_store_figures(2000 if args.quick else 10000))
    gateway = None if args.no_gateway else gateway_figures(1 if args.quick else 5, 5 if args.quick else 10)
    meta = spine.run_meta(argv)
    spine.save_results("metering", {"meta": meta, "stores": stores, "gateway": gateway})
    markdown = section(meta, stores, gateway)
    print(markdown)
    if not args.no_doc:
        spine.update_doc("metering", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
