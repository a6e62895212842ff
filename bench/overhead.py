"""The gateway's overhead, measured against its upstream called directly in the same run.

    python -m bench.overhead [--quick]      # the figures: RPS c64, latency c8, stream TTFB, CPU, RSS
    python -m bench.overhead --compare      # workers 1/2/3 and access log on/off, side by side
    python -m bench.overhead --profile      # py-spy on one worker under c64 load: top hotspots

Everything runs on 127.0.0.1: a fast upstream (nginx returning a fixed chat.completion, or
the simulator if nginx is missing), the simulator for streams, the gateway as `python -m
gateway.cli serve`, and wrk as the load generator. Each figure through the gateway is
paired with the same figure against the upstream directly, measured in the same run,
because on a 2-core machine shared by all of them absolute numbers drift from run to run.
Results go to bench/results/*.json and, as a section, to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import (
    CHAT_BODY,
    DISTURBED_PCT,
    LOCK_PATH,
    RESULTS_DIR,
    ROOT,
    UPSTREAM_REPLY,
    BenchError,
    Processes,
    Server,
    Stack,
    git_revision,
    machine_lock,
    met,
    nginx_binary,
    rss_mb,
    run_header,
    served_load,
    start_floor,
    start_gateway,
    start_stack,
    stream_ttfb,
    update_doc,
    wait_quiet,
    write_wrk_script,
)
from bench.profile import profile, profile_section

TARGETS = {
    "rps_c64": 5000.0,  # at least
    "added_p50_ms": 0.6,  # at most
    "added_p99_ms": 3.0,
    "added_ttfb_p50_ms": 1.0,
    "rss_mb": 100.0,
}

COMPARED = ((1, True), (2, True), (3, True), (1, False), (2, False))


def measure(
    stack: Stack,
    args: argparse.Namespace,
    gateways: dict[str, Server],
    floor: Server | None = None,
    *,
    stream: bool = True,
) -> dict[str, dict[str, Any]]:
    """Load figures for each gateway, each next to its own direct (and floor) run: within a
    round the targets run one after the other, so each pair sees the same machine. With several
    gateways (--compare) they take turns, round after round, so noise spreads over all of them.
    Then, per gateway, the streams (if asked) and RSS. Returns one result per gateway."""
    script = write_wrk_script(stack)
    names = ["direct", *(["floor"] if floor is not None else []), "gateway"]
    results: dict[str, dict[str, Any]] = {
        key: {"settings": dict(g.settings), "targets": names, "c64": {n: [] for n in names}, "c8": {}}
        for key, g in gateways.items()
    }
    for result in results.values():
        result["c8"] = {n: [] for n in names}
    warm = [(stack.direct_url, None)] + [(s.url, s.proc.pid) for s in (floor, *gateways.values()) if s]
    print(f"warm-up {args.warmup:.0f}s each: {len(warm)} targets", file=sys.stderr)
    for url, pid in warm:
        served_load(url, pid, script, 64, args.warmup)
    for connections in (64, 8):
        for r in range(args.rounds):
            print(
                f"c{connections} round {r + 1}/{args.rounds}: {len(gateways)} x {', '.join(names)} "
                f"({args.duration:.0f}s each)",
                file=sys.stderr,
            )
            for key, gateway in gateways.items():
                targets: dict[str, tuple[str, int | None]] = {"direct": (stack.direct_url, None)}
                if floor is not None:
                    targets["floor"] = (floor.url, floor.proc.pid)
                targets["gateway"] = (gateway.url, gateway.proc.pid)
                for name, (url, pid) in targets.items():
                    run = served_load(url, pid, script, connections, args.duration, latency=True)
                    results[key][f"c{connections}"][name].append(run)
    for key, gateway in gateways.items():
        out = results[key]
        if stream:
            print(f"streams: {args.stream_n} each, direct and gateway alternating", file=sys.stderr)
            quiet = wait_quiet()
            out["stream"] = stream_ttfb(stack, gateway, args.stream_n, warmup=max(10, args.stream_n // 10))
            out["stream"].update(quiet)
        workers = gateway.worker_pids()
        rss = {pid: rss_mb(pid) for pid in workers}
        out["rss_mb_by_worker"] = rss
        out["rss_mb_max"] = max((v for v in rss.values() if v is not None), default=float("nan"))
        out["workers_seen"] = len(workers)
        if gateway.log.exists():
            out["gateway_log_bytes"] = gateway.log.stat().st_size
        out["summary"] = summarise(out)
    return results


def _clean(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs that other processes on the machine did not disturb; if none, the least disturbed."""
    clean = [r for r in runs if r.get("foreign_cpu_pct", 0.0) <= DISTURBED_PCT]
    return clean or [min(runs, key=lambda r: float(r.get("foreign_cpu_pct", 0.0)))]


def summarise(out: dict[str, Any]) -> dict[str, Any]:
    """Per target, medians over the undisturbed rounds; added = gateway - direct; CPU per request
    summed over the undisturbed c64 (and c8) runs."""
    s: dict[str, Any] = {}
    dropped = 0
    for name in out["targets"]:
        c64, c8 = _clean(out["c64"][name]), _clean(out["c8"][name])
        dropped += len(out["c64"][name]) + len(out["c8"][name]) - len(c64) - len(c8)
        s[f"rps_{name}"] = statistics.median(r["rps"] for r in c64)
        s[f"rps_c8_{name}"] = statistics.median(r["rps"] for r in c8)
        s[f"p50_{name}_ms"] = statistics.median(r["p50_us"] for r in c8) / 1000
        s[f"p99_{name}_ms"] = statistics.median(r["p99_us"] for r in c8) / 1000
        s[f"errors_{name}"] = sum(r["errors"] for r in out["c64"][name] + out["c8"][name])
        s[f"all_cpu_ms_per_request_{name}"] = statistics.median(r["our_cpu_ms_per_request"] for r in c64)
        if name != "direct":
            for label, runs in (("", c64), ("_c8", c8)):
                cpu = sum(r["cpu_s"] for r in runs)
                s[f"cpu_ms_per_request{label}_{name}"] = 1000 * cpu / max(sum(r["requests"] for r in runs), 1)
    s["runs_total"] = sum(len(runs) for c in ("c64", "c8") for runs in out[c].values())
    s["runs_disturbed_left_out"] = dropped
    every_run = [r for c in ("c64", "c8") for runs in out[c].values() for r in runs]
    s["machine_steal_pct_max"] = max(r["machine_steal_pct"] for r in every_run)
    s["foreign_cpu_pct_max"] = max(r["foreign_cpu_pct"] for r in every_run)
    s["foreign_cpu_pct_median"] = statistics.median(r["foreign_cpu_pct"] for r in every_run)
    s["rss_mb_max"] = out["rss_mb_max"]
    s["rps_ratio"] = s["rps_gateway"] / s["rps_direct"]
    s["added_p50_ms"] = s["p50_gateway_ms"] - s["p50_direct_ms"]
    s["added_p99_ms"] = s["p99_gateway_ms"] - s["p99_direct_ms"]
    if "floor" in out["targets"]:
        s["rps_gateway_vs_floor"] = s["rps_gateway"] / s["rps_floor"]
    if "stream" in out:
        st = out["stream"]
        for who in ("direct", "gateway"):
            s[f"ttfb_{who}_p50_ms"] = st[f"{who}_ttfb"]["p50_ms"]
            s[f"ttfb_{who}_p99_ms"] = st[f"{who}_ttfb"]["p99_ms"]
            s[f"stream_total_{who}_p50_ms"] = st[f"{who}_total"]["p50_ms"]
        s["added_ttfb_p50_ms"] = s["ttfb_gateway_p50_ms"] - s["ttfb_direct_p50_ms"]
        s["added_ttfb_p99_ms"] = s["ttfb_gateway_p99_ms"] - s["ttfb_direct_p99_ms"]
    return s


def _fmt(v: float | None, digits: int = 2) -> str:
    return "" if v is None else f"{v:,.{digits}f}"


def _signed(v: float, digits: int = 3) -> str:
    return f"{v:+,.{digits}f}"


def _row(
    figure: str, direct: str, floor: str, gateway: str, versus: str, target: str = "", verdict: str = ""
) -> str:
    return f"| {figure} | {direct} | {floor} | {gateway} | {versus} | {target} | {verdict} |"


def overhead_section(meta: dict[str, Any], result: dict[str, Any]) -> str:
    s, st = result["summary"], result["settings"]
    c64 = result["c64"]["gateway"]
    has_floor = "floor" in result["targets"]

    def floor(key: str, digits: int) -> str:
        return _fmt(s[key], digits) if has_floor else "n/a"

    p50_ok = s["added_p50_ms"] <= TARGETS["added_p50_ms"]
    p99_ok = s["added_p99_ms"] <= TARGETS["added_p99_ms"]
    ttfb_ok = s["added_ttfb_p50_ms"] <= TARGETS["added_ttfb_p50_ms"]
    stream_added = s["stream_total_gateway_p50_ms"] - s["stream_total_direct_p50_ms"]
    rows = [
        _row("figure", "direct", "floor proxy", "gateway", "gateway vs direct", "target", "met"),
        "|---|---|---|---|---|---|---|",
        _row(
            "RPS at c64",
            _fmt(s["rps_direct"], 0),
            floor("rps_floor", 0),
            _fmt(s["rps_gateway"], 0),
            f"{100 * s['rps_ratio']:.1f} % of direct",
            ">= 5,000",
            met(s["rps_gateway"] >= TARGETS["rps_c64"]),
        ),
        _row(
            "p50 at c8 (ms)",
            _fmt(s["p50_direct_ms"], 3),
            floor("p50_floor_ms", 3),
            _fmt(s["p50_gateway_ms"], 3),
            f"{_signed(s['added_p50_ms'])} ms",
            "added <= 0.6 ms",
            met(p50_ok),
        ),
        _row(
            "p99 at c8 (ms)",
            _fmt(s["p99_direct_ms"], 3),
            floor("p99_floor_ms", 3),
            _fmt(s["p99_gateway_ms"], 3),
            f"{_signed(s['added_p99_ms'])} ms",
            "added <= 3 ms",
            met(p99_ok),
        ),
        _row(
            "RPS at c8",
            _fmt(s["rps_c8_direct"], 0),
            floor("rps_c8_floor", 0),
            _fmt(s["rps_c8_gateway"], 0),
            f"{100 * s['rps_c8_gateway'] / s['rps_c8_direct']:.1f} % of direct",
        ),
        _row(
            "stream TTFB p50 (ms)",
            _fmt(s["ttfb_direct_p50_ms"], 3),
            "",
            _fmt(s["ttfb_gateway_p50_ms"], 3),
            f"{_signed(s['added_ttfb_p50_ms'])} ms",
            "added <= 1 ms",
            met(ttfb_ok),
        ),
        _row(
            "stream TTFB p99 (ms)",
            _fmt(s["ttfb_direct_p99_ms"], 3),
            "",
            _fmt(s["ttfb_gateway_p99_ms"], 3),
            f"{_signed(s['added_ttfb_p99_ms'])} ms",
        ),
        _row(
            "whole stream p50 (ms)",
            _fmt(s["stream_total_direct_p50_ms"], 3),
            "",
            _fmt(s["stream_total_gateway_p50_ms"], 3),
            f"{_signed(stream_added)} ms",
        ),
        _row(
            "CPU per request at c64 (ms, all server processes)",
            "",
            floor("cpu_ms_per_request_floor", 3),
            _fmt(s["cpu_ms_per_request_gateway"], 3),
            f"c8: {_fmt(s['cpu_ms_per_request_c8_gateway'], 3)} ms",
        ),
        _row(
            "CPU per request at c64, whole benchmark (ms; wrk + upstream + server)",
            _fmt(s["all_cpu_ms_per_request_direct"], 3),
            floor("all_cpu_ms_per_request_floor", 3),
            _fmt(s["all_cpu_ms_per_request_gateway"], 3),
            f"ceiling on {os.cpu_count()} cores: "
            f"{_fmt(1000 * (os.cpu_count() or 1) / s['all_cpu_ms_per_request_gateway'], 0)} RPS",
        ),
        _row(
            "RSS per worker, max (MB)",
            "",
            "",
            _fmt(s["rss_mb_max"], 1),
            "",
            "<= 100 MB",
            met(s["rss_mb_max"] <= TARGETS["rss_mb"]),
        ),
    ]
    floor_note = (
        f"The floor proxy (`bench/floor_proxy.py`, {st['workers']} workers, same uvicorn settings) "
        f"is the bare aiohttp proxy of the reference floor, measured in this run; the gateway does "
        f"{100 * s['rps_gateway_vs_floor']:.0f} % of its RPS at c64."
        if has_floor
        else "The floor proxy was not run (--no-floor)."
    )
    lines = [
        "## Overhead against a direct upstream",
        "",
        run_header(meta)
        + f"- Gateway: {st['workers']} workers, access log {'on' if st['access_log'] else 'off'}; "
        f"{len(c64)} round(s) of {c64[0]['duration_us'] / 1e6:.0f} s per load figure (medians), "
        f"{result['stream']['n']} streamed requests each way",
        "",
        *rows,
        "",
        floor_note,
        f"wrk errors: {s['errors_gateway']} through the gateway, {s['errors_direct']} direct. "
        f"{s['runs_disturbed_left_out']} of {s['runs_total']} load runs left out of the medians "
        f"(other processes used > {DISTURBED_PCT:.0f} % of the cores meanwhile). "
        f"CPU used by other processes on the machine during a load run (not ours): median "
        f"{s['foreign_cpu_pct_median']:.1f} %, max {s['foreign_cpu_pct_max']:.1f} % of the cores; "
        f"steal max {s['machine_steal_pct_max']:.1f} %. "
        f"Raw: `{meta['results_file']}`.",
    ]
    return "\n".join(lines)


def compare_section(meta: dict[str, Any], rows: list[dict[str, Any]], duration: float) -> str:
    lines = [
        "## Configurations compared",
        "",
        run_header(meta)
        + "- All configurations run side by side as separate gateways and take turns: in each round, "
        f"each one's run follows its own direct run ({duration:.0f} s each), "
        f"{len(rows[0]['c64']['gateway'])} rounds, medians over the undisturbed runs "
        f"({sum(r['summary']['runs_disturbed_left_out'] for r in rows)} of "
        f"{sum(r['summary']['runs_total'] for r in rows)} left out); no stream figures",
        "",
        "| workers | access log | RPS c64 (direct) | gateway % of direct | p50 c8 added (ms) "
        "| p99 c8 added (ms) | CPU ms/request c64 | RSS/worker (MB) | wrk errors | foreign CPU % (max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        s, st = row["summary"], row["settings"]
        cells = [
            str(st["workers"]),
            "on" if st["access_log"] else "off",
            f"{_fmt(s['rps_gateway'], 0)} ({_fmt(s['rps_direct'], 0)})",
            f"{100 * s['rps_ratio']:.1f} %",
            _signed(s["added_p50_ms"]),
            _signed(s["added_p99_ms"]),
            _fmt(s["cpu_ms_per_request_gateway"], 3),
            _fmt(s["rss_mb_max"], 1),
            str(s["errors_gateway"]),
            f"{s['foreign_cpu_pct_median']:.0f} ({s['foreign_cpu_pct_max']:.0f})",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Raw: `{meta['results_file']}`."]
    return "\n".join(lines)


def metadata(args: argparse.Namespace, stack: Stack, results_file: Path) -> dict[str, Any]:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    def run(argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False, cwd=ROOT)
        except (OSError, subprocess.TimeoutExpired):
            return "?"
        return (done.stdout + done.stderr).strip()

    cpu = "?"
    with contextlib.suppress(OSError):
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            "?",
        )
    if stack.upstream_kind == "nginx":
        nginx = run([nginx_binary() or "nginx", "-v"]).replace("nginx version: ", "")
        upstream = (
            f"{nginx}, {args.nginx_workers} worker(s), `return 200` with a {len(UPSTREAM_REPLY)}-byte body"
        )
    else:
        upstream = "the simulator, zero-latency mode (nginx not available)"
    return {
        "command": " ".join(["python -m bench.overhead", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git_revision(),
        "machine": (
            f"{os.cpu_count()} cores ({cpu}), Linux {platform.release()}, Python {platform.python_version()}"
        ),
        "upstream": upstream,
        "upstream_kind": stack.upstream_kind,
        "versions": ", ".join(
            [f"{d} {version(d)}" for d in ("uvicorn", "uvloop", "httptools", "aiohttp", "orjson")]
            + [run(["wrk", "-v"]).split(" Copyright")[0]]
        ),
        "request_body_bytes": len(CHAT_BODY),
        "results_file": str(results_file.relative_to(ROOT)),
    }


def print_summary(s: dict[str, Any]) -> None:
    for key, value in s.items():
        print(f"  {key:32} {value:,.3f}" if isinstance(value, float) else f"  {key:32} {value}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--compare", action="store_true", help="workers 1/2/3, access log on/off")
    mode.add_argument("--profile", action="store_true", help="py-spy one worker under c64 load")
    mode.add_argument(
        "--render",
        metavar="JSON",
        type=Path,
        help="rewrite the docs section from a saved overhead/compare result",
    )
    parser.add_argument("--quick", action="store_true", help="3 s runs, 1 round, 100 streams: a smoke test")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-access-log", dest="access_log", action="store_false")
    parser.add_argument("--upstream", choices=("auto", "nginx", "simulator"), default="auto")
    parser.add_argument("--nginx-workers", type=int, default=1)
    parser.add_argument("--duration", type=float, help="seconds per wrk run (default 10; quick 3)")
    parser.add_argument("--warmup", type=float, help="seconds of warm-up load (default 3; quick 1)")
    parser.add_argument("--rounds", type=int, help="rounds per load figure (default 3, compare 2, quick 1)")
    parser.add_argument("--stream-n", type=int, help="streamed requests each way (default 500; quick 100)")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=harness.QUIET_MAX_WAIT_S,
        help="before each load run, wait up to this many seconds for the machine to be idle (default 30)",
    )
    parser.add_argument("--profile-seconds", type=float, default=10.0)
    parser.add_argument("--profile-rate", type=int, default=200)
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    parser.add_argument("--no-floor", dest="floor", action="store_false", help="skip the bare floor proxy")
    parser.add_argument("--no-doc", dest="doc", action="store_false", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    quick = args.quick
    args.duration = args.duration or (3.0 if quick else 10.0)
    args.warmup = args.warmup or (1.0 if quick else 3.0)
    args.rounds = args.rounds or (1 if quick else 2 if args.compare else 3)
    args.stream_n = args.stream_n or (100 if quick else 500)
    if not 1 <= args.rounds <= 20 or not 1 <= args.duration <= 120 or not 10 <= args.stream_n <= 20_000:
        parser.error("rounds 1..20, duration 1..120 s, stream-n 10..20000")
    return args


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def render(path: Path) -> int:
    """Summarise a saved result again (e.g. after a change to the summary) and rewrite its section."""
    data = json.loads(path.read_text())
    meta = data["meta"]
    if "rows" in data:
        for row in data["rows"]:
            row["summary"] = summarise(row)
        duration = data["rows"][0]["c64"]["gateway"][0]["duration_us"] / 1e6
        update_doc("compare", compare_section(meta, data["rows"], duration))
    else:
        data["result"]["summary"] = summarise(data["result"])
        update_doc("overhead", overhead_section(meta, data["result"]))
    path.write_text(json.dumps(data, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        return render(args.render)
    if shutil.which("wrk") is None:
        print("wrk is not installed", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGALRM, _on_sigterm)
    harness.QUIET_MAX_WAIT_S = args.quiet_wait  # a run-wide setting, read by wait_quiet
    signal.alarm(3600 + 60 * round(args.quiet_wait))  # a hard bound on the whole run, whatever hangs
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    mode = "compare" if args.compare else "profile" if args.profile else "overhead"
    results_file = RESULTS_DIR / f"{mode}-{stamp}.json"
    procs = Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-"))
    exits = contextlib.ExitStack()
    try:
        waited = exits.enter_context(machine_lock())
        if waited > 1:
            print(f"waited {waited:.0f}s for {LOCK_PATH}", file=sys.stderr)
        stack = start_stack(procs, tmp, args.upstream, args.nginx_workers)
        print(
            f"upstream: {stack.upstream_kind} on :{stack.fast_port}; simulator on :{stack.sim_port}",
            file=sys.stderr,
        )
        meta = metadata(args, stack, results_file)
        if args.compare:
            gateways = {
                f"w{w}-{'log' if log else 'nolog'}": start_gateway(stack, w, log) for w, log in COMPARED
            }
            rows = list(measure(stack, args, gateways, stream=False).values())
            for row in rows:
                print(f"== {row['settings']}", file=sys.stderr)
                print_summary(row["summary"])
            results_file.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str))
            if args.doc:
                update_doc("compare", compare_section(meta, rows, args.duration))
        elif args.profile:
            gateway = start_gateway(stack, args.workers, args.access_log)
            prof = profile(stack, gateway, args, tmp)
            kept = RESULTS_DIR / f"profile-{stamp}-raw.txt"
            shutil.copy(prof["raw"], kept)
            prof["raw"] = str(kept.relative_to(ROOT))
            results_file.write_text(json.dumps({"meta": meta, "profile": prof}, indent=2))
            for title in ("self", "self_python", "inclusive", "areas"):
                print(f"-- {title} ({prof['samples']} samples)")
                for row in prof[title]:
                    print(f"  {row['pct']:5.1f}%  {row['function']}")
            if args.doc:
                update_doc("profile", profile_section(meta, prof, gateway.settings, args))
        else:
            floor = start_floor(stack, args.workers) if args.floor else None
            gateway = start_gateway(stack, args.workers, args.access_log)
            result = measure(stack, args, {"gateway": gateway}, floor)["gateway"]
            results_file.write_text(json.dumps({"meta": meta, "result": result}, indent=2, default=str))
            print_summary(result["summary"])
            if args.doc:
                update_doc("overhead", overhead_section(meta, result))
        print(f"results: {results_file}", file=sys.stderr)
        return 0
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
        exits.close()


if __name__ == "__main__":
    raise SystemExit(main())
