"""What sessions cost the whole pipeline, in process: the gateway's ASGI application with
everything on (Redis metering with leases, the shipped policy and its decision log,
redaction both ways, metrics, the access log), driven directly against the benchmark's
nginx, once with sessions off and once on; the CPU this process spends per request.

    python -m bench.sessions_inproc [--base REV [--base-tree PATH]] [--repeats R] [--requests N]
                                    [--rounds K] [--sessions S]

Every request names one of 64 sessions (`x-session-id`), or of `--sessions` (with 4,096 a
session's turns come over a second apart and nearly each one reads its record, as an agent's
do), as `python -m bench.sessions` sends them. Each measurement runs in a fresh process, 64
requests at once; the least of its rounds is kept (the machine's other work only ever adds to
a round), and the variants alternate, so the difference between "on" and "off" is what
sessions add: their stages, the session update on the settle (built, folded into the lease's
batch, packed), the record reads through the worker's cache, their metrics and their fields in
the access line and the decision log. What the HTTP server and Redis's own process spend is
left out (`python -m bench.sessions` has both); this is the gateway's own share, with far less
of the machine's noise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import runpy
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.harness import CHAT_BODY

CONCURRENCY = 64
CHAT = CHAT_BODY.encode()
VARIANTS = ("off", "on")
PATIENT_MS = 60_000  # the policy's and the store's timeouts under callgrind (`opa_url` given)


def child(
    port: int,
    variant: str,
    requests: int,
    rounds: int,
    sessions_named: int,
    opa_url: str | None = None,
    session_cache_s: float | None = None,
) -> None:
    """In the tree on sys.path: the whole pipeline's app with sessions `variant`, then
    `rounds` rounds of `requests` requests; prints each round's CPU us per request as JSON.
    With `opa_url` (`bench.callgrind`) the policy is asked of that OPA server (its decisions
    cached), not regopy, and the policy and the store are given a minute to answer;
    `session_cache_s` replaces `sessions.cache_s`."""
    import uvloop

    from bench.metering import REDIS_URL, policy_dir
    from gateway.app import create_app
    from gateway.config import load_config
    from gateway.keys import generate_key, hash_key
    from gateway.logs import configure_logging
    from gateway.redaction.settings import scrubber_for
    from gateway.serve import tune_gc

    key = generate_key()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-sessions-inproc-"))
    policy = policy_dir(tmp)
    prefix = f"tgbench-{uuid.uuid4().hex[:8]}"
    config_doc = {
        "server": {"host": "127.0.0.1", "port": 1, "workers": 1, "access_log": True, "log_level": "info"},
        "upstreams": {"fast": {"kind": "openai_compat", "base_url": f"http://127.0.0.1:{port}/v1"}},
        "models": {"bench-model": [{"upstream": "fast", "model": "bench-upstream-model"}]},
        "tenants": {
            "bench": {
                "models": ["*"],
                "budgets": [{"window": "day", "usd": 1e6}, {"window": "month", "tokens": 10**12}],
                "rate_limits": {"requests_per_minute": 10**9, "tokens_per_minute": 10**12},
            }
        },
        "keys": [{"tenant": "bench", "hash": hash_key(key)}],
        "prices": {"bench-upstream-model": {"input": 0.95, "cached_input": 0.16, "output": 4.0}},
        "state": {"store": "redis", "redis_url": REDIS_URL, "key_prefix": prefix},
        "policy": {"dir": str(policy)}
        if opa_url is None
        else {
            "dir": str(policy),
            "engine": "opa",
            "opa": {"url": opa_url, "timeout_ms": PATIENT_MS},
            "cache": {"ttl_s": 86400},
            "timeout_ms": PATIENT_MS,
        },
        "audit": {"sink": "jsonl", "path": str(tmp / "audit.jsonl")},
        "sessions": {"enabled": variant == "on"}
        if session_cache_s is None
        else {"enabled": variant == "on", "cache_s": session_cache_s},
    }
    if opa_url is not None:  # under callgrind: a request takes some 50 times as long
        config_doc["state"]["timeout_s"] = PATIENT_MS / 1000
    path = tmp / "config.yaml"
    path.write_text(json.dumps(config_doc))  # JSON is YAML
    config = load_config(path)
    out = sys.stdout
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the access lines, for the process's life)
    configure_logging("info", scrubber_for(config))
    app = create_app(config)
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {key}".encode()),
        (b"content-length", str(len(CHAT)).encode()),
    ]
    sessions = [(b"x-session-id", b"bench-session-%d" % n) for n in range(sessions_named)]
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}
    scope |= {"query_string": b"", "http_version": "1.1", "scheme": "http"}
    sent = itertools.count()

    def scope_of() -> dict[str, Any]:
        return {**scope, "headers": [*headers, sessions[next(sent) % sessions_named]]}

    drive = runpy.run_path(str(Path(__file__).with_name("inproc.py")))["drive"]  # not the measured tree's
    try:
        print(
            json.dumps(uvloop.run(drive(app, scope_of, CHAT, requests, rounds, 40, tune_gc, CONCURRENCY))),
            file=out,
        )
    except SystemExit:
        sys.stderr = sys.__stderr__  # why the run stopped, where the parent reads it
        raise
    finally:
        from bench.sessions_gateway import delete_keys

        delete_keys(prefix)


def measure(tree: Path, variant: str, port: int, args: argparse.Namespace) -> float:
    """The least of a fresh process's rounds, with `tree`'s packages first on its path."""
    from bench.inproc import least_of_child  # here: a child imports its tree's `bench`, maybe without it

    argv = ["--child", "--variant", variant, "--port", str(port), "--requests", str(args.requests)]
    argv += ["--sessions", str(args.sessions)]
    return least_of_child(tree, __file__, [*argv, "--rounds", str(args.rounds)])


def compare(args: argparse.Namespace) -> dict[str, Any]:
    from bench.inproc import upstream_and_trees

    with upstream_and_trees(args.base, "tollgate-bench-sessions-inproc-", args.base_tree) as (port, trees):
        runs = [(name, variant) for name in trees for variant in VARIANTS]
        figures: dict[str, list[float]] = {f"{name} {variant}": [] for name, variant in runs}
        for repeat in range(args.repeats):
            for name, variant in runs if repeat % 2 == 0 else runs[::-1]:
                label = f"{name} {variant}"
                figures[label].append(measure(trees[name], variant, port, args))
                print(f"{label:9s} {figures[label][-1]:7.1f} us/request", flush=True)
    medians = {label: statistics.median(values) for label, values in figures.items()}
    return {"runs": figures, "medians": medians, "trees": list(trees)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions_inproc")
    parser.add_argument("--base", help="also this git revision's pipeline (before)")
    parser.add_argument("--base-tree", help="--base's revision already checked out (and compiled) here")
    parser.add_argument("--repeats", type=int, default=4, help="fresh processes per variant, alternating")
    parser.add_argument("--requests", type=int, default=3200, help="requests per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per process (the least is kept)")
    parser.add_argument("--sessions", type=int, default=64, help="how many sessions the requests name")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.port, args.variant, args.requests, args.rounds, args.sessions)
        return 0
    from bench.harness import machine_lock

    with machine_lock():
        result = compare(args)
    medians = result["medians"]
    for name in result["trees"]:
        off, on = medians[f"{name} off"], medians[f"{name} on"]
        print(
            f"{name}: off {off:.1f} us, on {on:.1f} us: sessions add {on - off:+.1f} us a request "
            f"({100 * (on / off - 1):+.1f} % of the pipeline's CPU)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
