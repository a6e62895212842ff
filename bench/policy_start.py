"""What checking the policy costs a start: the check child alone, and `tollgate serve` to ready.

    python -m bench.policy_start [--base REV] [--rounds N] [--no-serve]

- check child: `python -m adapters.policy ENTRYPOINT` on the shipped policy (the source on
  stdin), as `tollgate serve` and a reload run it: its wall time, user and system CPU and
  peak RSS (from wait4). With `--base REV`, the same child of a `git archive` of REV too,
  the two alternating round by round.
- serve: `tollgate serve` with the shipped tollgate.yaml (its workers, its policy) from
  the start of the process to /healthz answering 200, with an empty check cache (cold) and
  with the entry the cold start left (warm), alternating. Each start gets a fresh policy
  state directory, so that only the check cache differs.

Prints the figures (medians); docs/benchmarks.md, "Policy check at start", has a run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.harness import free_port, machine_lock, stop_group
from gateway.config import CACHE_DIR_ENV

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = "gateway/authz/decision"
READY_TIMEOUT_S = 180.0


def check_child(checkout: Path) -> dict[str, float]:
    """The check child of `checkout` on its shipped policy: wall s, user s, sys s, peak RSS MB."""
    source = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from adapters.policy.source import read_policy_dir; "
            "sys.stdout.buffer.write(read_policy_dir('policies').to_json())",
        ],
        cwd=checkout,
        capture_output=True,
        check=True,
    ).stdout
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "adapters.policy", ENTRYPOINT],
        cwd=checkout,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(source)
    child.stdin.close()
    report = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    if status != 0 or b'"ok":true' not in report:
        raise SystemExit(f"the check child of {checkout} failed: {report[:300]!r}")
    rss_mb = usage.ru_maxrss / 1024
    return {"wall_s": wall, "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "rss_mb": rss_mb}


def serve_to_ready(cache_dir: Path, work: Path) -> float:
    """Seconds from starting `tollgate serve` (shipped config) to /healthz 200."""
    state = Path(tempfile.mkdtemp(prefix="state-", dir=work))
    config = work / "tollgate.yaml"
    text = (ROOT / "tollgate.yaml").read_text().replace("dir: policies", f"dir: {ROOT / 'policies'}", 1)
    config.write_text(text.replace("  entrypoint:", f"  state_dir: {state}\n  entrypoint:", 1))
    port = free_port()
    env = {**os.environ, CACHE_DIR_ENV: str(cache_dir)}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", str(port)],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while time.monotonic() - started < READY_TIMEOUT_S:
            if proc.poll() is not None:
                raise SystemExit(f"tollgate serve exited with {proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise SystemExit("tollgate serve was not ready in time")
    finally:
        stop_group(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="a git revision whose check child is measured alongside")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-serve", action="store_true", help="the check child only")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tollgate-bench-start-"))
    try:
        with machine_lock():
            run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def run(args: argparse.Namespace, work: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · git {head.stdout.strip()}")
    checkouts = {"this tree": ROOT}
    if args.base:
        base = work / "base"
        base.mkdir()
        archive = subprocess.run(["git", "archive", args.base], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        checkouts = {f"base {args.base}": base, **checkouts}
    child: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    serve: dict[str, list[float]] = {"cold cache": [], "warm cache": []}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            child[name].append(check_child(checkout))
        if not args.no_serve:
            cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
            serve["cold cache"].append(serve_to_ready(cache, work))
            serve["warm cache"].append(serve_to_ready(cache, work))
    print("check child (medians):")
    for name, runs in child.items():
        figures = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        print(
            f"  {name}: {figures['wall_s']:.1f} s wall, {figures['user_s']:.1f} s user, "
            f"{figures['sys_s']:.1f} s sys, {figures['rss_mb']:,.0f} MB peak RSS"
        )
    if not args.no_serve:
        print("tollgate serve, start to /healthz 200 (medians):")
        for name, times in serve.items():
            print(f"  {name}: {statistics.median(times):.1f} s  ({', '.join(f'{t:.1f}' for t in times)})")


if __name__ == "__main__":
    raise SystemExit(main())
