"""The simulator's own throughput in zero-latency mode, this tree against another git revision.

    python -m bench.simulator                   # HEAD~0 working tree against --base (default: main)
    python -m bench.simulator --base <rev> --rounds 3 --duration 5

Each round starts the simulator of each tree in turn (a separate process; which tree goes first
alternates) and drives it with a closed loop of aiohttp clients (non-streamed, then streamed with
usage), so both trees see the same machine; the medians per tree are printed. It is the benchmarks' upstream
for streams, so a change to it must not make it slower.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench.harness import HOST, ROOT, Processes, free_port, machine_lock, wait_http_ok

BODY = {
    "model": "bench-upstream-model",
    "messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Say hello to the overhead benchmark in one short sentence, please."},
    ],
    "max_tokens": 16,
    "temperature": 0,
}
STREAM_BODY = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
_RUN_FROM_TREE = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "import simulator; print('simulator from', simulator.__file__, flush=True); "
    "runpy.run_module('simulator', run_name='__main__')"
)


async def _load(url: str, body: dict[str, object], concurrency: int, seconds: float) -> tuple[float, int]:
    payload = orjson.dumps(body)
    headers = {"Content-Type": "application/json"}
    done = 0
    deadline = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            async with session.post(url, data=payload, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"simulator answered {response.status}")
            done += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        return done / (time.monotonic() - started), done


def _export(rev: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", rev, "simulator"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(tree: Path, tmp: Path, concurrency: int, seconds: float) -> list[tuple[float, float]]:
    """(requests/s, server CPU ms per request) for non-streamed, then streamed requests."""
    procs = Processes()
    port = free_port()
    log = tmp / f"sim-{tree.name}.log"
    # `python -m` would put the working directory (this tree) first on sys.path: put `tree` first
    argv = [sys.executable, "-c", _RUN_FROM_TREE, str(tree), "--host", HOST, "--port", str(port)]
    try:
        proc = procs.start("simulator", argv, log)
        wait_http_ok(f"http://{HOST}:{port}/health", proc, "simulator", log)
        url = f"http://{HOST}:{port}/v1/chat/completions"
        figures = []
        for body in (BODY, STREAM_BODY):
            cpu_before = _cpu_s(proc.pid)
            rps, count = asyncio.run(_load(url, body, concurrency, seconds))
            figures.append((rps, (_cpu_s(proc.pid) - cpu_before) * 1000 / count))
        return figures
    finally:
        procs.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="main", help="git revision to compare with (default: main)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per load run")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    results: dict[str, list[list[tuple[float, float]]]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp_name, machine_lock():
        tmp = Path(tmp_name)
        base = (tmp / "base").resolve()
        base.mkdir()
        trees = {"base": _export(args.base, base), "this": ROOT}
        for round_index in range(args.rounds):
            order = list(trees.items())
            if round_index % 2:  # alternate which tree goes first, so neither always runs warm
                order.reverse()
            for name, tree in order:
                results[name].append(_measure(tree, tmp, args.concurrency, args.duration))
    print(
        f"simulator, zero-latency mode, c{args.concurrency}, {args.rounds} x {args.duration:.0f} s "
        "(medians: requests/s, server CPU ms per request)"
    )
    for name, runs in results.items():
        label = args.base if name == "base" else "this tree"
        cells = []
        for kind, index in (("non-streamed", 0), ("streamed", 1)):
            rps = statistics.median(r[index][0] for r in runs)
            cpu = statistics.median(r[index][1] for r in runs)
            cells.append(f"{kind} {rps:6.0f} rps {cpu:.3f} ms")
        print(f"  {label:>12}: " + "   ".join(cells))


if __name__ == "__main__":
    main()
