"""What sessions cost, and what compaction saves.

    python -m bench.sessions [--quick] [--no-gateway | --gateway-only] [--no-doc] [--rounds N]
                             [--seconds S]
    python -m bench.sessions --profile off|on [--seconds S] [--perf]  # py-spy (or perf) one worker

- bookkeeping: one session request's own work in this process: the session stages (the
  record read through the worker's cache, limits and checkpoint settings settled), the
  record's update built at settle, and the settle sent with the update riding on it, against
  the same settle without it (Redis and SQLite; CPU of this process per request).
- gateway: wrk c64 against one gateway (2 workers) running the whole pipeline (Redis
  metering with a budget, the shipped policy, redaction masking both ways, the decision log,
  metrics), every request naming one of 64 sessions, with `sessions.enabled` false and true;
  rounds of back-to-back pairs, the order alternating, medians (`sessions_gateway.py`).
- compaction: a 40-turn session on the simulator (the client re-sends its whole history),
  without and with compact checkpoints every 8 turns: the upstream's input tokens per turn and
  the simulator's prefix cache hit ratio (cached / prompt tokens over every request it served,
  summaries included), with a prefix cache that holds the whole history (4,096 blocks) and with
  one that does not (64 blocks of 16 tokens); then 32 such sessions at once on one replica,
  by cache size (`sessions_shared.py`).

Results go to bench/results/sessions-*.json and the "Sessions" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from adapters.state.redis import RedisStore
from adapters.state.sqlite import SQLiteStore
from bench import harness as spine
from bench.metering import REDIS_URL
from bench.sessions_gateway import delete_keys, gateway_figures, gateway_lines, profile_gateway
from bench.sessions_shared import shared_lines, shared_runs
from gateway.config import GatewayConfig
from gateway.exchange import Attempt, Endpoint, Exchange, Principal, Tenant
from gateway.metering.records import Settlement
from gateway.ports import StateStore
from gateway.redaction.settings import scrubber_for
from gateway.sessions.settings import SessionSettings
from gateway.sessions.stages import SessionCheck, SessionOpen
from gateway.sessions.store_access import SessionStore
from gateway.sessions.summarizer import Summarizer
from gateway.sessions.update import session_update
from simulator import SimConfig, Simulator
from tests.harness import openai_upstream
from tests.servers import UPSTREAM_KEY, running_gateway
from tests.servers import gateway_config as test_gateway_config

TARGET_CPU_MS = 0.03
TARGET_THROUGHPUT_LOSS = 0.05
TURNS, EVERY = 40, 8


def _config() -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "upstreams": {"u": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
            "models": {"chat": [{"upstream": "u", "model": "m"}]},
            "tenants": {"acme": {}},
        }
    )


async def bookkeeping(store: StateStore, n: int) -> dict[str, float]:
    config = _config()
    settings = SessionSettings(config)
    sessions = SessionStore(lambda: store, ttl_s=3600)
    opened = SessionOpen(sessions)
    check = SessionCheck(settings, sessions, Summarizer(str), scrubber_for(config), metered=True)
    principal = Principal(Tenant("acme"), "k-bench")
    tenant = f"bench-{uuid.uuid4().hex[:8]}"

    def exchange() -> Exchange:
        ex = Exchange("req", Endpoint.CHAT, 0.0, 1e12, {"x-workflow": "bench"}, b"")
        ex.principal, ex.session_key, ex.model_alias = principal, "0123456789abcdef0123456789abcdef", "chat"
        ex.body = {"model": "chat", "messages": [{"role": "user", "content": "hello"}]}
        ex.attempts = [Attempt("u", "m", 0.0, status=200)]
        ex.decision_id = "d" * 32
        return ex

    def settlement(ex: Exchange | None) -> Settlement:
        update = session_update(ex, settings, 100, 60, 40, 300, ex.attempts[-1]) if ex is not None else None
        if update is not None:
            update = dataclasses.replace(update, tenant=tenant)
        return Settlement(tenant, uuid.uuid4().hex, (), (), None, 900, session=update)

    async def stages_only() -> None:
        ex = exchange()
        await opened(ex)
        await check(ex)
        session_update(ex, settings, 100, 60, 40, 300, ex.attempts[-1])

    for _ in range(200):
        await stages_only()
        await store.settle(settlement(exchange()))
        await store.settle(settlement(None))

    async def cpu_per(call: Any) -> float:
        started = time.process_time()
        for _ in range(n):
            await call()
        return 1000 * (time.process_time() - started) / n

    stage_ms = await cpu_per(stages_only)
    # The two settles alternate in blocks, so the machine's load falls on both alike.
    plain: list[float] = []
    ridden: list[float] = []
    for _ in range(10):
        plain.append(await cpu_per(lambda: store.settle(settlement(None))))
        ridden.append(await cpu_per(lambda: store.settle(settlement(exchange()))))
    return {
        "stages_cpu_ms": stage_ms,
        "settle_cpu_ms": statistics.median(plain),
        "settle_with_session_cpu_ms": statistics.median(ridden),
    }


async def all_bookkeeping(n: int) -> dict[str, Any]:
    prefix = f"tgbench-{uuid.uuid4().hex[:8]}"
    results: dict[str, Any] = {}
    store: StateStore = RedisStore(REDIS_URL, prefix)
    try:
        results["redis"] = await bookkeeping(store, n)
    finally:
        await store.aclose()
        delete_keys(prefix)
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-sessions-") as tmp:
        store = SQLiteStore(Path(tmp) / "state.db")
        try:
            results["sqlite"] = await bookkeeping(store, n // 2)
        finally:
            await store.aclose()
    return results


def compaction(cache_blocks: int, compact: bool) -> dict[str, Any]:
    system = {"role": "system", "content": "You are a careful assistant. " * 8}
    with (
        tempfile.TemporaryDirectory(prefix="tollgate-bench-compact-") as tmp,
        Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, cache_blocks=cache_blocks)) as sim,
    ):
        checkpoints = {"mode": "compact", "every_turns": EVERY, "summarizer": "cheap"} if compact else {}
        config = test_gateway_config(
            upstreams={"local": openai_upstream(sim.openai_base_url(0))},
            models={
                "chat": [{"upstream": "local", "model": "sim-model"}],
                "cheap": [{"upstream": "local", "model": "sim-model"}],
            },
            state={"sqlite_path": str(Path(tmp) / "state.db")},
            sessions={"enabled": True, "checkpoints": checkpoints},
        )
        inputs: list[int] = []
        with running_gateway(config) as gateway, httpx.Client(base_url=gateway.url, timeout=30) as client:
            history: list[Any] = [system]
            headers = {"authorization": "Bearer tg-test-key-alpha", "x-session-id": uuid.uuid4().hex}
            for n in range(TURNS):
                history.append(
                    {"role": "user", "content": f"Question {n}: " + "tell me more about this " * 6}
                )
                answer = client.post(
                    "/v1/chat/completions", json={"model": "chat", "messages": history}, headers=headers
                ).json()
                history.append(answer["choices"][0]["message"])
                inputs.append(answer["usage"]["prompt_tokens"])
        [stats] = sim.replica_stats()
        summaries = sum(1 for r in sim.requests if r.body["messages"][-1]["content"].startswith("Summarize"))
    return {
        "inputs": inputs,
        "ratio": stats["cached_tokens"] / stats["prompt_tokens"],
        "upstream_prompt_tokens": stats["prompt_tokens"],
        "summaries": summaries,
    }


def section(
    meta: dict[str, Any], b: dict[str, Any], g: dict[str, Any] | None, c: dict[str, Any], s: dict[str, Any]
) -> str:
    r, q = b["redis"], b["sqlite"]
    extra_r = r["settle_with_session_cpu_ms"] - r["settle_cpu_ms"]
    extra_q = q["settle_with_session_cpu_ms"] - q["settle_cpu_ms"]
    lines = [
        "## Sessions",
        "",
        f"- Command: `python -m bench.sessions{meta['args']}` · {meta['date']} · git {meta['git']}",
        "- Machine: a 2-core VM shared with other builds and tests while it ran (busy, noisy):",
        "  compare the rows of one run with each other, not with other sections.",
        "",
        "| session bookkeeping, CPU of the gateway process per request | Redis | SQLite | target | met |",
        "|---|---|---|---|---|",
        f"| session stages (cached record read, limits, checkpoint settings) + the update built "
        f"| {r['stages_cpu_ms']:.4f} ms | {q['stages_cpu_ms']:.4f} ms | | |",
        f"| settle, without the session update | {r['settle_cpu_ms']:.4f} ms "
        f"| {q['settle_cpu_ms']:.4f} ms | | |",
        f"| settle, with the session update riding on it | {r['settle_with_session_cpu_ms']:.4f} ms "
        f"| {q['settle_with_session_cpu_ms']:.4f} ms | | |",
        f"| added by sessions: stages + update + the settle's difference "
        f"| {r['stages_cpu_ms'] + extra_r:.4f} ms | {q['stages_cpu_ms'] + extra_q:.4f} ms "
        f"| <= {TARGET_CPU_MS} ms | {spine.met(r['stages_cpu_ms'] + extra_r <= TARGET_CPU_MS)} (Redis) |",
    ]
    if g is not None:
        lines += gateway_lines(g, TARGET_THROUGHPUT_LOSS)
    lines += [
        "",
        f"A {TURNS}-turn session on the simulator, the client re-sending its whole history; compact "
        f"checkpoints every {EVERY} turns (summaries by an alias on the same simulator):",
        "",
        "| prefix cache | compaction | upstream input tokens at turns 1 / 10 / 20 / 30 / 40 | max | "
        "all turns' input | summaries | cache hit ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, run in c.items():
        blocks, mode = name.split("/")
        inputs = run["inputs"]
        picks = " / ".join(str(inputs[i]) for i in (0, 9, 19, 29, 39))
        lines.append(
            f"| {blocks} blocks | {mode} | {picks} | {max(inputs)} | {sum(inputs):,} | {run['summaries']} "
            f"| {run['ratio']:.3f} |"
        )
    big_off, big_on = c["4096/off"], c["4096/on"]
    small_off, small_on = c["64/off"], c["64/on"]
    lines += [
        "",
        f"Compaction cuts the input the upstream gets over the session from {sum(big_off['inputs']):,} "
        f"to {sum(big_on['inputs']):,} tokens and bounds it per turn ({max(big_on['inputs'])} at most, "
        f"against {max(big_off['inputs'])} and growing). For one session alone on a replica, its effect "
        "on the prefix cache depends on whether the cache holds the whole history. With 4,096 blocks it "
        f"does, and compaction lowers the ratio ({big_off['ratio']:.2f} -> {big_on['ratio']:.2f}): with "
        "nothing evicted the ratio is 1 - misses / input, and compaction lowers the input and adds "
        "misses (each turn's new text is a larger share of a shorter prompt, each new summary is "
        "new text), so no compaction design can win there. With 64 blocks it does not: the "
        f"uncompacted session loses its history's tail as it grows ({small_off['ratio']:.2f}) while "
        f"the compacted prompt fits ({small_on['ratio']:.2f}).",
        *shared_lines(s),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions")
    parser.add_argument("--quick", action="store_true", help="fewer requests, 1 round of 5 s")
    parser.add_argument("--no-gateway", action="store_true", help="no wrk runs")
    parser.add_argument(
        "--gateway-only", action="store_true", help="the wrk comparison alone (printed, the doc left as is)"
    )
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--rounds", type=int, default=12, help="gateway rounds (pairs, order alternating)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds of each gateway run")
    parser.add_argument("--profile", choices=("off", "on"), help="py-spy one worker of this variant instead")
    parser.add_argument(
        "--sessions",
        type=int,
        default=64,
        help="how many sessions the requests name (--gateway-only, --profile)",
    )
    parser.add_argument("--perf", action="store_true", help="--profile with Linux perf instead of py-spy")
    parser.add_argument(
        "--update-hold",
        type=float,
        default=0.0,
        help="sessions.update_hold_s of the gateway with sessions on (--gateway-only)",
    )
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    seconds = 5 if args.quick else args.seconds
    if args.profile:
        prof = profile_gateway(args.profile, seconds, args.sessions, args.perf)
        titles = ("threads", "areas", "self") if args.perf else ("areas", "inclusive", "self_python")
        for title in titles:
            print(f"-- {title}")
            for row in prof[title]:
                print(f"{row['pct']:5.1f} %  {row['function']}")
        print(f"samples {prof['samples']}, raw stacks {prof['raw']}")
        return 0
    if args.gateway_only:
        meta = spine.run_meta(argv)
        figures = gateway_figures(rounds, seconds, args.sessions, args.update_hold)
        spine.save_results("sessions-gateway", {"meta": meta, "gateway": figures})
        print(f"python -m bench.sessions{meta['args']} · {meta['date']} · git {meta['git']}")
        print("\n".join(gateway_lines(figures, TARGET_THROUGHPUT_LOSS)))
        return 0
    books = asyncio.run(all_bookkeeping(200 if args.quick else 500))
    runs = {
        f"{blocks}/{'on' if on else 'off'}": compaction(blocks, on)
        for blocks in (4096, 64)
        for on in (False, True)
    }
    shared = shared_runs()
    gateway = None if args.no_gateway else gateway_figures(rounds, seconds)
    meta = spine.run_meta(argv)
    spine.save_results(
        "sessions",
        {"meta": meta, "bookkeeping": books, "gateway": gateway, "compaction": runs, "shared": shared},
    )
    markdown = section(meta, books, gateway, runs, shared)
    print(markdown)
    if not args.no_doc:
        spine.update_doc("sessions", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
