"""The spine in process: the gateway with nothing on (access log on), its ASGI application
driven directly, with no HTTP server in front, against the benchmark's nginx; the CPU this
process spends per request. This tree against a git revision's, alternating, in one run.

    python -m bench.spine_inproc [--base REV] [--repeats R] [--requests N]

What the HTTP server (uvicorn) costs is left out, and so is most of the machine's noise: the
figure is the application's own work per request (admission, the stages, the forward with
aiohttp, the finishers), which is what a change to the spine changes. Each measurement runs
in a fresh process (`--child`), 64 requests at once; the least of its rounds is kept, and the
medians over the repeats are compared. `python -m bench.leases` gives the end-to-end figures.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import CHAT_BODY

CONCURRENCY = 64
CHAT = CHAT_BODY.encode()  # what wrk posts in the end-to-end benchmarks


def child(port: int, requests: int, rounds: int) -> None:
    """In the tree on sys.path: the spine's app, its lifespan started, then `rounds` rounds of
    `requests` requests; prints the CPU microseconds per request of each round as JSON."""
    import uvloop

    from gateway.app import create_app
    from gateway.config import load_config
    from gateway.keys import generate_key, hash_key
    from gateway.logs import configure_logging
    from gateway.redaction.settings import scrubber_for
    from gateway.serve import tune_gc

    key = generate_key()
    config_doc = {
        "server": {"host": "127.0.0.1", "port": 1, "workers": 1, "access_log": True, "log_level": "info"},
        "upstreams": {"fast": {"kind": "openai_compat", "base_url": f"http://127.0.0.1:{port}/v1"}},
        "models": {"bench-model": [{"upstream": "fast", "model": "bench-upstream-model"}]},
        "tenants": {"bench": {"models": ["*"]}},
        "keys": [{"tenant": "bench", "hash": hash_key(key), "label": "bench"}],
    }
    path = Path(tempfile.mkdtemp(prefix="tollgate-spine-inproc-")) / "config.yaml"
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
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}
    scope |= {"query_string": b"", "http_version": "1.1", "scheme": "http"}

    drive = runpy.run_path(str(Path(__file__).with_name("inproc.py")))["drive"]  # not the measured tree's
    figures = uvloop.run(drive(app, lambda: dict(scope), CHAT, requests, rounds, 20, tune_gc, CONCURRENCY))
    print(json.dumps(figures), file=out)


def measure(tree: Path, port: int, args: argparse.Namespace) -> float:
    """The least of a fresh process's rounds, with `tree`'s packages first on its path."""
    from bench.inproc import least_of_child  # here: a child imports its tree's `bench`, maybe without it

    argv = ["--child", "--port", str(port), "--requests", str(args.requests), "--rounds", str(args.rounds)]
    return least_of_child(tree, __file__, argv)


def compare(args: argparse.Namespace) -> dict[str, Any]:
    from bench.inproc import upstream_and_trees

    with upstream_and_trees(args.base, "tollgate-bench-spine-inproc-") as (port, trees):
        figures: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, tree in trees.items():
                figures[name].append(measure(tree, port, args))
                print(f"{name:5s} {figures[name][-1]:7.1f} us/request", flush=True)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    return {"runs": figures, "medians": medians}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spine_inproc")
    parser.add_argument("--base", help="also this git revision's spine (before)")
    parser.add_argument("--repeats", type=int, default=4, help="fresh processes per tree, alternating")
    parser.add_argument("--requests", type=int, default=6000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per process (the least is kept)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.port, args.requests, args.rounds)
        return 0
    result = compare(args)
    medians = result["medians"]
    line = "  ".join(f"{name} {value:.1f} us" for name, value in medians.items())
    if "base" in medians:
        line += f"  this/base {medians['this'] / medians['base']:.3f}"
    print(f"medians: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
