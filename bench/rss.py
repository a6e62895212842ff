"""A worker's resident memory over a long run of the whole pipeline: does it stay flat?

    python -m bench.rss [--segments N] [--segment-s S] [--workers W]

One gateway with the whole pipeline (`bench.leases`'s "whole": the shipped policy with
masking both ways, Redis budgets and rate limits with leases, the decision log, metrics)
on the nginx upstream, loaded with wrk c64 in N segments of S seconds; after each segment,
the requests served so far and each worker's RSS. Prints the curve and keeps it in
bench/results/rss-*.json; it writes no docs section (quote the figures by hand).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from bench import harness as spine
from bench.leases import serve, start_redis
from bench.metering import gateway_config, policy_dir
from gateway.keys import generate_key, hash_key


def run(args: argparse.Namespace) -> dict[str, Any]:
    procs = spine.Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-rss-"))
    key = generate_key()
    try:
        stack = spine.start_stack(procs, tmp, "auto", 1)
        stack = dataclasses.replace(stack, api_key=key, key_hash=hash_key(key))
        script = spine.write_wrk_script(stack)
        redis_port = start_redis(procs, tmp)
        redis_url = f"redis://{spine.HOST}:{redis_port}/0"
        state = {"store": "redis", "redis_url": redis_url, "key_prefix": "tgbench"}
        config = gateway_config(stack, spine.free_port(), stack.key_hash, state, policy_dir(tmp))
        config["server"]["workers"] = args.workers
        proc, port = serve(stack, "rss", config)
        url = f"http://{spine.HOST}:{port}{spine.CHAT_PATH}"
        workers = spine.Server("rss", proc, port, tmp / "rss.log", {}).worker_pids()
        spine.wrk(url, script, 64, 2.0)
        curve: list[dict[str, Any]] = [{"requests": 0, "rss_mb": [spine.rss_mb(p) for p in workers]}]
        served = 0
        for _ in range(args.segments):
            load = spine.wrk(url, script, 64, args.segment_s)
            if load["errors"] or load.get("non2xx"):
                raise spine.BenchError(f"wrk saw errors: {load}")
            served += load["requests"]
            point = {"requests": served, "rps": load["rps"], "rss_mb": [spine.rss_mb(p) for p in workers]}
            curve.append(point)
            rss = ", ".join(f"{mb:.1f}" for mb in point["rss_mb"] if mb is not None)
            print(f"{served:>10,} requests  {load['rps']:8,.0f} rps  RSS per worker (MB): {rss}", flush=True)
        return {"workers": args.workers, "curve": curve}
    finally:
        procs.stop_all()


def main(argv: list[str] | None = None) -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--segments", type=int, default=12)
    parser.add_argument("--segment-s", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    meta = spine.run_meta(argv)
    with spine.machine_lock():
        result = run(args)
    path = spine.save_results("rss", {"meta": meta, **result})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
