"""Bytecode executed per request, by function: a count the machine's load does not move.

    python -m bench.opcodes [--pipeline spine|whole|sessions] [--base REV] [--requests N] [--top K]

On this shared 2-core machine a change of a few microseconds a request is below what any
timing resolves (rounds of the same code scatter by 5-10 %). This runs the in-process
benchmarks' application (`spine_inproc`: the gateway with nothing on; `sessions_inproc`: the
whole pipeline, sessions off, or on with `sessions`) under a tracer that counts the Python
opcodes each function executes from the end of start-up on (warm-up and measured requests
alike), and prints the total per request and the functions that differ most between this tree
and `--base`'s. What runs in C (orjson, Hyperscan, hashing, the event loop's own work) is not
counted, nor is any thread but the event loop's (the decision log's writer, a thread pool's
work); what is counted is deterministic but for what depends on the clock (a lease's
batch window, a session record's cache age: the tracer slows a request some 50 times, so
record reads and settle batches weigh more per request than at full speed, in both trees).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

WARM_UP = {"spine": 20, "whole": 40, "sessions": 40}  # what each child's drive warms up with
CONCURRENCY = 64


def child(pipeline: str, port: int, requests: int, out: str) -> None:
    """In the tree on sys.path: the pipeline's child, counted from the end of its start-up;
    the counts by function ("path:name"), and the requests they came from, as JSON in `out`."""
    import gateway.serve

    counts: collections.Counter[str] = collections.Counter()
    names: dict[Any, str] = {}

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        name = names.get(code)
        if name is None:
            path = code.co_filename
            for root in (sys.path[0], "site-packages/", sysconfig.get_paths()["stdlib"]):
                path = path.split(root)[-1]
            name = names[code] = f"{path.lstrip('/')}:{code.co_name}"

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[name] += 1
            return local

        return local

    tune_gc = gateway.serve.tune_gc

    def started() -> None:
        tune_gc()
        sys.settrace(tracer)  # this thread's: the event loop's

    gateway.serve.tune_gc = started  # the children call it once their app has started
    if pipeline == "spine":
        from bench import spine_inproc

        spine_inproc.child(port, requests, 1)
    else:
        from bench import sessions_inproc

        sessions_inproc.child(port, "on" if pipeline == "sessions" else "off", requests, 1, 64)
    sys.settrace(None)
    each = max(requests // CONCURRENCY, 1) * CONCURRENCY
    Path(out).write_text(json.dumps({"counts": counts, "requests": each + WARM_UP[pipeline] * CONCURRENCY}))


def counted(tree: Path, pipeline: str, port: int, requests: int, tmp: Path) -> dict[str, float]:
    """Opcodes per request by function, counted in a fresh process with `tree` first on its path."""
    from bench.inproc import run_child

    out = tmp / f"{tree.name}-{pipeline}.json"
    argv = [
        "--child",
        "--pipeline",
        pipeline,
        "--port",
        str(port),
        "--requests",
        str(requests),
        "--out",
        str(out),
    ]
    run_child(tree, __file__, argv)
    found = json.loads(out.read_text())
    return {name: count / found["requests"] for name, count in found["counts"].items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.opcodes")
    parser.add_argument("--pipeline", choices=sorted(WARM_UP), default="whole")
    parser.add_argument("--base", help="also this git revision's pipeline, and the difference")
    parser.add_argument("--requests", type=int, default=640, help="measured requests (after the warm-up)")
    parser.add_argument("--top", type=int, default=25, help="functions listed")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.pipeline, args.port, args.requests, args.out)
        return 0
    from bench.harness import machine_lock
    from bench.inproc import upstream_and_trees

    with machine_lock(), upstream_and_trees(args.base, "tollgate-bench-opcodes-") as (port, trees):
        tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-opcodes-"))
        by_tree = {
            name: counted(tree, args.pipeline, port, args.requests, tmp) for name, tree in trees.items()
        }
    for name, counts in by_tree.items():
        print(f"{name}: {sum(counts.values()):,.0f} opcodes a request ({args.pipeline})")
    this = by_tree["this"]
    if "base" not in by_tree:
        for name, count in sorted(this.items(), key=lambda item: -item[1])[: args.top]:
            print(f"{count:9.1f}  {name}")
        return 0
    base = by_tree["base"]
    change = sorted((this.get(n, 0.0) - base.get(n, 0.0), n) for n in this.keys() | base.keys())
    print(f"this - base: {sum(this.values()) - sum(base.values()):+,.0f} opcodes a request")
    for delta, name in [*change[: args.top // 2], *change[-(args.top - args.top // 2) :]]:
        if round(delta, 1):
            print(f"{delta:+9.1f}  {name}  ({base.get(name, 0.0):.1f} -> {this.get(name, 0.0):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
