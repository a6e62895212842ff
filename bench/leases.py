"""The whole pipeline with budget leases, against the floor proxy and the spine, in one
interleaved run; store calls and Redis CPU per request counted on a redis-server of the
benchmark's own.

    python -m bench.leases [--rounds R] [--duration S] [--workers N] [--base REV] [--no-doc]
    python -m bench.leases --profile whole  # py-spy on one worker of a variant under load
    python -m bench.leases --profile whole --profile-streams  # the same under a load of streams
    python -m bench.leases --profile whole --native  # with C frames: the compiled modules' own
    python -m bench.leases --profile whole --perf  # Linux perf: own time by native symbol and library
    python -m bench.leases --micro          # one request's metering in process: exact vs leased

Variants, each started fresh and loaded in turn every round (wrk c64, after a warm-up),
each with `--workers` workers (default 2):
- floor: `bench/floor_proxy.py` (same uvicorn settings);
- spine: the gateway with nothing on (access log on);
- whole: the whole pipeline (the shipped policy with redaction masking both ways, Redis
  budgets and rate limits, the decision log, metrics; `bench/metering.py`'s config) with
  leases (`state.leases: true`, the default);
- whole-exact: the same with `state.leases: false` (every request reserved and settled on
  its own, as before leases);
- whole-no-audit, -redaction, -metering, -access-log, -policy (with `--ablate`): the whole
  pipeline without one of its parts (without the policy: no decisions, no decision log, no
  redaction), for what each part costs a loaded gateway;
- base (with `--base REV`): the whole pipeline of that revision (a git worktree of it,
  imported first; `--base-tree PATH`, a checkout of it made and compiled beforehand, for a
  compiled before against a compiled after), for the before/after of everything else; and
  spine-base, that revision's spine (when the spine is run).

Per run: RPS, the server's CPU per request (its process tree), RSS per worker, and from the
benchmark's Redis (INFO commandstats and INFO cpu, before and after): script calls per
request and Redis CPU per request. Medians over the rounds. Results in
bench/results/leases-*.json and the "Leases" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
import yaml

from adapters.state.redis import RedisStore
from bench import harness as spine
from bench.metering import gateway_config, policy_dir
from bench.profile import profile
from gateway.keys import generate_key, hash_key
from gateway.metering.leases import Leases
from gateway.metering.plan import Budget, MeterPlan, Periods, RateLimit
from gateway.metering.records import BudgetCharge, LedgerEntry, RateCharge, ReserveRequest, Settlement

MICRO_REDIS = "redis://127.0.0.1:6379/0"


def start_redis(procs: spine.Processes, tmp: Path) -> int:
    port = spine.free_port()
    argv = ["redis-server", "--port", str(port), "--bind", spine.HOST, "--dir", str(tmp)]
    argv += ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
    procs.start("redis", argv, tmp / "redis.log")
    client = redis.Redis(host=spine.HOST, port=port)
    for _ in range(100):
        try:
            client.ping()
            return port
        except redis.ConnectionError:
            time.sleep(0.1)
    raise spine.BenchError("the benchmark's redis-server did not start")


def redis_counts(port: int) -> tuple[int, float]:
    """Script calls so far (EVALSHA + EVAL) and Redis's CPU seconds so far."""
    client = redis.Redis(host=spine.HOST, port=port)
    try:
        stats = client.info("commandstats")
        cpu = client.info("cpu")
    finally:
        client.close()
    calls = sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def base_tree(revision: str, tmp: Path) -> Path:
    path = tmp / "base"
    subprocess.run(
        ["git", "-C", str(spine.ROOT), "worktree", "add", "--detach", str(path), revision],
        check=True,
        capture_output=True,
    )
    return path


def serve(
    stack: spine.Stack, name: str, config: dict[str, Any], tree: Path | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    port = config["server"]["port"]
    path = stack.tmp / f"{name}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = stack.tmp / f"{name}.log"
    prelude = []
    if tree is not None:  # that tree's packages first (the workers inherit sys.path)
        prelude = [
            "-c",
            f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); sys.argv[0] = 'tollgate'; "
            "runpy.run_module('gateway.cli', run_name='__main__')",
        ]
    else:
        prelude = ["-m", "gateway.cli"]
    argv = [sys.executable, *prelude, "serve", "--config", str(path), "--port", str(port)]
    proc = stack.procs.start(name, argv, log)
    spine.wait_http_ok(f"http://{spine.HOST}:{port}/healthz", proc, name, log)
    server = spine.Server(name, proc, port, log, {})
    server.wait_workers(config["server"]["workers"])
    return proc, port


def run_variants(args: argparse.Namespace) -> dict[str, Any]:
    procs = spine.Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-leases-"))
    key = generate_key()
    base = None
    try:
        stack = spine.start_stack(procs, tmp, "auto", 1)
        stack = dataclasses.replace(stack, api_key=key, key_hash=hash_key(key))
        script = spine.write_wrk_script(stack)
        stream_script = write_stream_script(stack)
        redis_port = start_redis(procs, tmp)
        policy = policy_dir(tmp)
        redis_url = f"redis://{spine.HOST}:{redis_port}/0"
        state = {"store": "redis", "redis_url": redis_url, "key_prefix": "tgbench"}

        def whole(
            leases: bool | None, tree: Path | None = None, without: str | None = None
        ) -> Callable[[str], tuple[Any, int]]:
            def start(name: str) -> tuple[Any, int]:
                port = spine.free_port()
                wanted = state if leases is None else {**state, "leases": leases}
                config = gateway_config(stack, port, stack.key_hash, wanted, policy)
                if without is not None:
                    ablate(config, without, tmp)
                config["server"]["workers"] = args.workers
                sim = f"http://{spine.HOST}:{stack.sim_port}/v1"
                config["upstreams"]["sim"] = {"kind": "openai_compat", "base_url": sim}
                config["models"][spine.STREAM_ALIAS] = [{"upstream": "sim", "model": "bench-upstream-model"}]
                return serve(stack, name, config, tree)

            return start

        def floor(name: str) -> tuple[Any, int]:
            server = spine.start_floor(stack, args.workers)
            return server.proc, server.port

        def spine_gateway(name: str) -> tuple[Any, int]:
            server = spine.start_gateway(stack, args.workers, True)
            return server.proc, server.port

        starts: dict[str, Callable[[str], tuple[Any, int]]] = {
            "floor": floor,
            "spine": spine_gateway,
            "whole": whole(True),
            "whole-exact": whole(False),
        }
        if args.only:
            starts = {name: start for name, start in starts.items() if name in args.only.split(",")}
        if args.ablate:
            starts |= {f"whole-no-{part}": whole(True, without=part) for part in ABLATIONS}
        if args.base:
            base = Path(args.base_tree) if args.base_tree else base_tree(args.base, tmp)
            starts["base"] = whole(None, base)
            if "spine" in starts:  # the spine's own before/after

                def spine_base(name: str, tree: Path = base) -> tuple[Any, int]:
                    port = spine.free_port()
                    return serve(stack, name, spine.spine_config(stack, port, args.workers, True), tree)

                starts["spine-base"] = spine_base
        if args.profile:
            profiled = stream_script if args.profile_streams else script
            return profile_variant(stack, starts[args.profile], args, tmp, profiled)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in starts}
        for round_no in range(args.rounds):
            # The order alternates from round to round: a variant always run after another
            # (the base after this tree's whole pipeline) would carry what that one left behind.
            order = list(starts.items())
            for name, start in order if round_no % 2 == 0 else order[::-1]:
                proc, port = start(f"{name}-{round_no}")
                url = f"http://{spine.HOST}:{port}{spine.CHAT_PATH}"
                spine.wrk(url, script, 64, args.warmup)
                calls0, cpu0 = redis_counts(redis_port)
                run = spine.served_load(url, proc.pid, script, 64, args.duration)
                calls1, cpu1 = redis_counts(redis_port)
                if run["errors"] or run.get("non2xx"):
                    raise spine.BenchError(f"{name}: wrk saw errors: {run}")
                served = max(run["requests"], 1)
                workers = [p for p in spine.process_tree(proc.pid) if p != proc.pid] or [proc.pid]
                rss = [mb for pid in workers if (mb := spine.rss_mb(pid)) is not None]
                run["store_calls_per_request"] = (calls1 - calls0) / served
                run["redis_cpu_ms_per_request"] = 1000 * (cpu1 - cpu0) / served
                run["rss_mb_max"] = max(rss) if rss else 0.0
                if args.streams and name != "floor":
                    run["stream"] = stream_figures(stack, stream_script, proc, port, args)
                runs[name].append(run)
                print(
                    f"{name:12s} rps {run['rps']:8,.0f}  cpu {run['cpu_ms_per_request']:.3f} ms  "
                    f"calls/req {run['store_calls_per_request']:.3f}  "
                    f"redis {run['redis_cpu_ms_per_request']:.4f} ms"
                    f"  rss {run['rss_mb_max']:.0f} MB  foreign {run['foreign_cpu_pct']:.0f}%",
                    flush=True,
                )
                procs.stop(proc)
        return {
            "upstream": stack.upstream_kind,
            "runs": runs,
            "medians": medians(runs),
            "streams": stream_medians(runs),
        }
    finally:
        procs.stop_all()
        if base is not None and not args.base_tree:  # a tree of the caller's is left as it is
            remove = ["git", "-C", str(spine.ROOT), "worktree", "remove", "--force", str(base)]
            subprocess.run(remove, check=False)


ABLATIONS = ("audit", "redaction", "metering", "access-log", "policy")


def ablate(config: dict[str, Any], part: str, tmp: Path) -> None:
    """The whole pipeline's config without one of its parts (`--ablate`): what that part costs
    a loaded gateway, its effect on everything else included."""
    if part == "audit":
        del config["audit"]
    elif part == "redaction":  # the shipped policy, the benchmark's tenant masking nothing
        plain = tmp / "policies-plain"
        if not plain.exists():
            plain.mkdir()
            for path in Path(config["policy"]["dir"]).iterdir():
                (plain / path.name).write_text(path.read_text())
            data = yaml.safe_load((plain / "data.yaml").read_text())
            data["tenants"]["bench"].pop("redact", None)
            (plain / "data.yaml").write_text(yaml.safe_dump(data))
        config["policy"]["dir"] = str(plain)
    elif part == "metering":
        del config["state"]
        for tenant in config["tenants"].values():
            tenant.pop("budgets", None)
            tenant.pop("rate_limits", None)
    elif part == "access-log":
        config["server"]["access_log"] = False
    elif part == "policy":  # and with it the decision log and the policy's redaction
        del config["policy"], config["audit"]
    else:
        raise ValueError(part)


def write_stream_script(stack: spine.Stack) -> Path:
    """wrk's script for streams: the benchmark's chat body with `stream: true` to the alias
    the simulator serves (its default answer: 16 tokens, one event each)."""
    doc = json.loads(spine.CHAT_BODY)
    doc["model"], doc["stream"] = spine.STREAM_ALIAS, True
    path = stack.tmp / "stream.lua"
    body = json.dumps(doc, separators=(",", ":"))
    path.write_text(spine.WRK_SCRIPT.format(body=body, key=stack.api_key))
    return path


def stream_figures(
    stack: spine.Stack, script: Path, proc: subprocess.Popen[bytes], port: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Streams through the variant: wrk c64 (throughput, CPU), then TTFB one at a time against
    the simulator called directly, alternating (`harness.stream_ttfb`)."""
    url = f"http://{spine.HOST}:{port}{spine.CHAT_PATH}"
    load = spine.served_load(url, proc.pid, script, 64, args.duration)
    if load["errors"] or load.get("non2xx"):
        raise spine.BenchError(f"streams saw errors: {load}")
    server = spine.Server("streams", proc, port, stack.tmp / "streams.log", {})
    ttfb = spine.stream_ttfb(stack, server, args.stream_n, warmup=20)
    return {
        "rps": load["rps"],
        "cpu_ms_per_request": load["cpu_ms_per_request"],
        "ttfb_added_p50_ms": ttfb["gateway_ttfb"]["p50_ms"] - ttfb["direct_ttfb"]["p50_ms"],
        "ttfb": ttfb,
    }


def profile_variant(
    stack: spine.Stack,
    start: Callable[[str], tuple[Any, int]],
    args: argparse.Namespace,
    tmp: Path,
    script: Path,
) -> dict[str, Any]:
    """py-spy on one worker of the variant under wrk c64 (`bench/profile.py`), with `script`'s load."""
    proc, port = start("profiled")
    server = spine.Server("profiled", proc, port, tmp / "profiled.log", {})
    options = argparse.Namespace(
        warmup=args.warmup,
        profile_seconds=args.duration,
        profile_rate=200,
        native=args.native,
        perf=args.perf,
    )
    result = profile(stack, server, options, tmp, script)
    if args.perf:
        titles: tuple[str, ...] = ("threads", "areas", "self")
    else:
        titles = ("areas", "inclusive", "self_python", *(("self",) if args.native else ()))
    for title in titles:
        print(f"-- {title}")
        for row in result[title][: 60 if args.perf else 25]:
            print(f"{row['pct']:5.1f} %  {row['function']}")
    return {"profile": result}


async def micro(n_per_worker: int = 200, concurrency: int = 64) -> dict[str, float]:
    """In process, on the local Redis: the metering of one request, as the meter stage and the
    settle finisher make it (two budgets, two rate limits, a ledger row), exact (reserve +
    settle) against leased (draw + settled, the batches sent in the background), 64 at once;
    this process's CPU per request."""
    prefix = f"tgbench-{uuid.uuid4().hex[:8]}"
    store = RedisStore(MICRO_REDIS, prefix)
    leases = Leases(store, 60, 900)
    plan = MeterPlan(
        budgets=(Budget("t", "day", "usd", 10**15, True), Budget("t", "month", "tok", 10**15, True)),
        rates=(RateLimit("t", "requests", 10**9), RateLimit("t", "tokens", 10**12)),
    )
    at = Periods.of(datetime.now(UTC))
    counters = tuple((b.counter(at), b.expires_at(at)) for b in plan.budgets)
    amounts = (16_900, 4_200)
    loop = asyncio.get_running_loop()

    async def one(exact: bool) -> None:
        made = ReserveRequest(
            "bench",
            uuid.uuid4().hex,
            tuple(BudgetCharge(c, a, 10**15, True, e) for (c, e), a in zip(counters, amounts, strict=True)),
            (RateCharge("t:rpm", 1, 10**9), RateCharge("t:tpm", 4_200, 10**12)),
            60.0,
        )
        spent = tuple((c, 300, e) for c, e in counters)
        settlement = Settlement(
            "bench", made.reservation_id, spent, (), LedgerEntry(at.day, "k", "m", 100, 60, 40, 300), 900
        )
        got = None if exact else await leases.draw(plan, at, counters, made, loop.time() + 30)
        if got is not None:
            leases.settled(got[0], settlement, 140)
        else:
            leases.observe(plan, at, made, await store.reserve(made))
            await store.settle(settlement)
        await asyncio.sleep(0)  # as a request's other awaits would: the loop runs its timers

    async def worker(exact: bool) -> None:
        for _ in range(n_per_worker):
            await one(exact)

    figures: dict[str, float] = {}
    try:
        for exact in (True, False, True, False):
            started = time.process_time()
            await asyncio.gather(*(worker(exact) for _ in range(concurrency)))
            cpu_ms = 1000 * (time.process_time() - started) / (n_per_worker * concurrency)
            name = "exact_cpu_ms" if exact else "leased_cpu_ms"
            figures[name] = min(figures.get(name, cpu_ms), cpu_ms)
    finally:
        await leases.aclose()
        await store.aclose()
        client = redis.Redis.from_url(MICRO_REDIS)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    return figures


def stream_medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    fields = ("rps", "cpu_ms_per_request", "ttfb_added_p50_ms")
    return {
        name: {f: statistics.median(r["stream"][f] for r in rs) for f in fields}
        for name, rs in runs.items()
        if rs and "stream" in rs[0]
    }


def medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    fields: tuple[str, ...] = ("rps", "cpu_ms_per_request", "store_calls_per_request")
    fields += ("redis_cpu_ms_per_request", "rss_mb_max")
    return {name: {f: statistics.median(r[f] for r in rs) for f in fields} for name, rs in runs.items() if rs}


def section(meta: dict[str, Any], result: dict[str, Any], args: argparse.Namespace) -> str:
    m = result["medians"]
    floor = m["floor"]
    lines = [
        "## Leases",
        "",
        f"- Command: `python -m bench.leases{meta['args']}` · {meta['date']} · git {meta['git']}",
        f"- {args.rounds} round(s) of {args.duration:g} s per variant, interleaved (the order reversed"
        " every other round; medians); wrk c64;",
        f"  {args.workers} workers each; upstream {result['upstream']}; a redis-server of the benchmark's",
        "  own (appendfsync everysec), so its script calls and CPU are this load's alone.",
        "- Machine: the 2-core VM, shared with other test runs at the time (busy: the",
        "  absolute figures are low and noisy; read the ratios, which come from the same minutes).",
        "",
        "| variant | RPS at c64 | of floor | CPU ms / request | vs floor | store calls / request "
        "| Redis CPU ms / request | RSS per worker (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, label in (
        ("floor", "floor proxy"),
        ("spine-base", f"spine, {args.base} (before)"),
        ("spine", "spine (gateway, nothing on)"),
        ("base", f"whole pipeline, {args.base} (before)"),
        ("whole-exact", "whole pipeline, leases off"),
        ("whole", "whole pipeline, leases on"),
        *((f"whole-no-{part}", f"whole pipeline without its {part}") for part in ABLATIONS),
    ):
        if name not in m:
            continue
        v = m[name]
        lines.append(
            f"| {label} | {v['rps']:,.0f} | {100 * v['rps'] / floor['rps']:.0f} % "
            f"| {v['cpu_ms_per_request']:.3f} | {v['cpu_ms_per_request'] / floor['cpu_ms_per_request']:.2f}x "
            f"| {v['store_calls_per_request']:.3f} | {v['redis_cpu_ms_per_request']:.4f} "
            f"| {v['rss_mb_max']:.0f} |"
        )
    streams = result.get("streams") or {}
    if "spine" in streams:
        base_rps = streams["spine"]["rps"]
        lines += [
            "",
            "Streams (the simulator's 16-token answer, one event a token; wrk c64; TTFB one at a time,",
            f"{args.stream_n} each way, alternating with the simulator called directly):",
            "",
            "| variant | streams / s at c64 | of spine's | CPU ms / stream | added TTFB p50 |",
            "|---|---|---|---|---|",
        ]
        for name in ("spine", "base", "whole-exact", "whole"):
            if name in streams:
                v = streams[name]
                lines.append(
                    f"| {name} | {v['rps']:,.0f} | {100 * v['rps'] / base_rps:.0f} % "
                    f"| {v['cpu_ms_per_request']:.3f} | {v['ttfb_added_p50_ms']:+.3f} ms |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.leases")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per measured wrk run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=2, help="workers of every server")
    parser.add_argument("--base", help="also the whole pipeline of this git revision (before)")
    parser.add_argument(
        "--base-tree",
        help="--base's revision already checked out here (and compiled: scripts/compile.sh), "
        "rather than in a fresh, plain worktree",
    )
    parser.add_argument("--quiet-wait", type=float, default=3.0, help="max wait for an idle machine per run")
    parser.add_argument("--no-doc", action="store_true")
    parser.add_argument("--only", help="comma-separated variants to run (default: all)")
    parser.add_argument("--streams", action="store_true", help="also streams: throughput at c64, TTFB")
    parser.add_argument("--stream-n", type=int, default=200, help="streamed requests each way for TTFB")
    parser.add_argument(
        "--micro", action="store_true", help="in process: one request's metering, exact vs leased"
    )
    parser.add_argument(
        "--ablate", action="store_true", help="also the whole pipeline without each of its parts"
    )
    parser.add_argument("--profile", help="py-spy one worker of this variant (whole, spine...) instead")
    parser.add_argument("--profile-streams", action="store_true", help="profile under a load of streams")
    parser.add_argument("--native", action="store_true", help="profile C frames too (the compiled modules)")
    parser.add_argument(
        "--perf",
        action="store_true",
        help="profile with Linux perf (every native function) instead of py-spy",
    )
    args = parser.parse_args(argv)
    spine.QUIET_MAX_WAIT_S = args.quiet_wait
    if args.micro:
        print(asyncio.run(micro()))
        return 0
    with spine.machine_lock():
        result = run_variants(args)
    meta = spine.run_meta(argv)
    spine.save_results("leases", {"meta": meta, **result})
    if args.profile:
        return 0
    if "floor" not in result["medians"]:  # the section reads everything against the floor
        print(json.dumps({"medians": result["medians"], "streams": result["streams"]}, indent=2))
        return 0
    markdown = section(meta, result, args)
    print(markdown)
    if not args.no_doc:
        spine.update_doc("leases", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
