"""What telemetry costs: gateway throughput with tracing and metrics on, exporting to a
receiver, against telemetry off, in the same run.

    python -m bench.telemetry [--quick] [--rounds R] [--duration S] [--no-doc] [--only NAME,...]

One gateway per configuration (2 workers, access log on, as `bench.overhead` runs it), all in
front of the same fast upstream (nginx `return 200`, or the simulator), and one OTLP/HTTP sink
(`bench/otlp_sink.py`) taking every export. wrk at c64 loads them in turn, round after round;
medians per configuration:

- off: no tracing, no metrics recorded (`metrics.prometheus: false`, no OTLP);
- metrics: the embedded default, metrics on /metrics, no tracing;
- traced 10 %: spans to the sink with `sampling_ratio: 0.1`, metrics on /metrics and pushed over OTLP;
- traced 100 %: the same with every request traced.

After each run it reads the spans each gateway dropped (queue full: the exporter could not keep
up) from its /metrics, since a dropped span is work not done. Results go to
bench/results/telemetry-*.json and the "Telemetry" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import harness as spine

HOST = spine.HOST
TARGET_LOSS_PCT = 15.0
CONFIGS: dict[str, dict[str, Any]] = {
    "off": {"metrics": {"prometheus": False}},
    "metrics": {},
    "traced 10 %": {"traces": {"sampling_ratio": 0.1}},
    "traced 100 %": {"traces": {"sampling_ratio": 1.0}},
}


def _telemetry(name: str, sink: str) -> dict[str, Any]:
    block: dict[str, Any] = {"metrics": {}, **CONFIGS[name]}
    if "traces" in block:
        block["traces"] = {"exporter": "otlp", "otlp": {"endpoint": sink}, **block["traces"]}
        block["metrics"] = {"otlp": {"endpoint": sink}}
    return block


def start_sink(stack: spine.Stack) -> str:
    port = spine.free_port()
    log = stack.tmp / "otlp-sink.log"
    proc = stack.procs.start(
        "otlp-sink", [sys.executable, "-m", "bench.otlp_sink", "--host", HOST, "--port", str(port)], log
    )
    url = f"http://{HOST}:{port}"
    spine.wait_http_ok(url + "/health", proc, "otlp-sink", log)
    return url


def start_gateway(stack: spine.Stack, name: str, telemetry: dict[str, Any], workers: int) -> spine.Server:
    port = spine.free_port()
    config = {
        "server": {"host": HOST, "port": port, "workers": workers, "access_log": True},
        "upstreams": {"fast": {"kind": "openai_compat", "base_url": f"http://{HOST}:{stack.fast_port}/v1"}},
        "models": {spine.MODEL_ALIAS: [{"upstream": "fast", "model": "bench-upstream-model"}]},
        "tenants": {"bench": {"models": ["*"]}},
        "keys": [{"tenant": "bench", "hash": stack.key_hash, "label": "bench"}],
        "telemetry": telemetry,
    }
    slug = name.replace(" ", "").replace("%", "pct")
    path = stack.tmp / f"gateway-{slug}.yaml"
    path.write_text(json.dumps(config, indent=2))
    log = stack.tmp / f"gateway-{slug}.log"
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path)]
    proc = stack.procs.start(f"gateway-{slug}", argv, log)
    server = spine.Server(f"gateway {name}", proc, port, log, {"telemetry": telemetry})
    spine.wait_http_ok(f"http://{HOST}:{port}/healthz", proc, server.name, log)
    server.wait_workers(workers)
    status, _ = spine.http(
        "POST",
        server.url,
        spine.CHAT_BODY.encode(),
        {"authorization": f"Bearer {stack.api_key}", "content-type": "application/json"},
    )
    if status != 200:
        raise spine.BenchError(f"{server.name} answered {status}")
    return server


def dropped_spans(server: spine.Server) -> float:
    status, page = spine.http("GET", f"http://{HOST}:{server.port}/metrics")
    if status != 200:
        return 0.0
    for family in text_string_to_metric_families(page.decode()):
        for sample in family.samples:
            if (
                sample.name == "tollgate_telemetry_dropped_total"
                and sample.labels.get("tollgate_signal") == "spans"
            ):
                return sample.value
    return 0.0


def run(rounds: int, seconds: float, workers: int, only: list[str]) -> dict[str, Any]:
    procs = spine.Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-telemetry-"))
    try:
        stack = spine.start_stack(procs, tmp, "auto", 1)
        sink = start_sink(stack)
        servers = {name: start_gateway(stack, name, _telemetry(name, sink), workers) for name in only}
        script = spine.write_wrk_script(stack)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in only}
        for round_index in range(rounds):
            order = list(only) if round_index % 2 == 0 else list(reversed(only))
            for name in order:
                server = servers[name]
                before = dropped_spans(server)
                result = spine.served_load(server.url, server.proc.pid, script, 64, seconds)
                result["dropped_spans"] = dropped_spans(server) - before
                runs[name].append(result)
                cpu, dropped = result["cpu_ms_per_request"], result["dropped_spans"]
                print(
                    f"  {name:>13}: {result['rps']:,.0f} req/s, {cpu:.3f} ms CPU/req, "
                    f"{dropped:.0f} spans dropped",
                    file=sys.stderr,
                )
        _, stats = spine.http("GET", sink + "/stats")
        return {
            "upstream": stack.upstream_kind,
            "workers": workers,
            "sink": json.loads(stats),
            "configs": {
                name: {
                    "rps": statistics.median(r["rps"] for r in results),
                    "cpu_ms_per_request": statistics.median(r["cpu_ms_per_request"] for r in results),
                    "dropped_spans": sum(r["dropped_spans"] for r in results),
                    "requests": sum(r["requests"] for r in results),
                    "errors": sum(r["errors"] for r in results),
                    "foreign_cpu_pct": max(r["foreign_cpu_pct"] for r in results),
                }
                for name, results in runs.items()
            },
            "runs": runs,
        }
    finally:
        procs.stop_all()


def section(meta: dict[str, Any], result: dict[str, Any]) -> str:
    configs = result["configs"]
    off = configs["off"]
    lines = [
        "## Telemetry",
        "",
        f"- Command: `python -m bench.telemetry{meta['args']}` · {meta['date']} · git {meta['git']}",
        f"- {result['workers']} workers, access log on, wrk c64, {meta['rounds']} round(s) of "
        f"{meta['duration']:.0f} s per configuration, alternating (medians); upstream: {result['upstream']}; "
        "spans and OTLP metrics to a local OTLP/HTTP sink (`bench/otlp_sink.py`). "
        "Same machine caveats as above: read the ratios.",
        "",
        "| configuration | RPS at c64 | vs off | CPU per request (ms) | spans dropped | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, figures in configs.items():
        loss = 100 * (1 - figures["rps"] / off["rps"])
        dropped = f"{figures['dropped_spans']:,.0f} of {figures['requests']:,} requests"
        target, met = "", ""
        if name != "off":
            target = f"<= {TARGET_LOSS_PCT:.0f} % less"
            met = "yes" if loss <= TARGET_LOSS_PCT else "**no**"
        lines.append(
            f"| {name} | {figures['rps']:,.0f} | {-loss:+.1f} % | {figures['cpu_ms_per_request']:.3f} "
            f"| {dropped if name.startswith('traced') else ''} | {target} | {met} |"
        )
    sink = result["sink"]
    foreign = max(c["foreign_cpu_pct"] for c in configs.values())
    lines.append("")
    if "traced 100 %" in configs and "metrics" in configs:
        per_trace = configs["traced 100 %"]["cpu_ms_per_request"] - configs["metrics"]["cpu_ms_per_request"]
        metrics_loss = 100 * (1 - configs["metrics"]["rps"] / configs["off"]["rps"])
        lines.append(
            f"A traced request costs about {per_trace:.2f} ms more CPU than an untraced one here (its seven "
            "spans recorded, encoded and sent; the sink's own CPU is not in the figure), so the loss "
            "grows with the sampled share: under load, keep `traces.sampling_ratio` at a value that "
            "fits the budget (a client's sampled `traceparent` still gets its request traced; the "
            "default ratio is 0.1). "
            f"Metrics alone cost {metrics_loss:.0f} % of the throughput here."
        )
    lines += [
        f"The sink took {sink['posts']:,} exports ({sink['bytes'] / 1e6:,.1f} MB). "
        f"Foreign CPU during the runs: at most {foreign:.0f} % of the cores. "
        f"Raw: `{meta['results_file']}`.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.telemetry")
    parser.add_argument("--quick", action="store_true", help="1 round of 4 s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument(
        "--only",
        # argparse expands % in help texts: the configurations' names have some.
        help=f"comma-separated configurations to run, of {', '.join(CONFIGS)} (implies --no-doc)".replace(
            "%", "%%"
        ),
    )
    args = parser.parse_args(argv)
    only = list(CONFIGS)
    if args.only:
        only = [name.strip() for name in args.only.split(",")]
        unknown = [name for name in only if name not in CONFIGS]
        if unknown:
            parser.error(f"unknown configuration(s): {', '.join(unknown)}")
        if "off" not in only:
            only.insert(0, "off")  # the losses are against it
    rounds, duration = (1, 4.0) if args.quick else (args.rounds, args.duration)
    with spine.machine_lock():
        result = run(rounds, duration, args.workers, only)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    spine.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    results_file = spine.RESULTS_DIR / f"telemetry-{stamp}.json"
    meta = {
        "args": "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:])),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "git": spine.git_revision(),
        "rounds": rounds,
        "duration": duration,
        "results_file": results_file.relative_to(spine.ROOT),
    }
    results_file.write_text(
        json.dumps({"meta": {**meta, "results_file": str(results_file)}, **result}, indent=2)
    )
    markdown = section(meta, result)
    print(markdown)
    if not args.no_doc and only == list(CONFIGS):
        spine.update_doc("telemetry", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
