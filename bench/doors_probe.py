"""Where a door's end-to-end CPU goes: per thread, gc, bytes sent, per door and mode.

    python -m bench.doors_probe [--rounds R] [--block B] [--door-timing] [--stored]

One gateway worker in front of the simulator, as `bench.doors` runs it; each door in blocks
of B sequential requests (blocks interleaved, the order rotated each round): each request's
CPU per thread of the worker (/proc/<pid>/task/*/schedstat), the gc collections and the CPU
they took in each block (a gc callback loaded into the worker only, read on SIGUSR1), and the
bytes each answer has. Prints a table; the first round is warm-up.

With --door-timing, the worker also times each door's own work where it runs (the site's
wrappers: `request`, `response`, `stream`, and the encoder's `chunk` and `done`), and a second
table gives each part's CPU per request, on average: the door code as a running gateway pays
for it, to set beside `bench.doors`' in-process figures. The wrappers add their own cost to
every door alike (two clock reads per call), so read the differences between doors.

With --stored, the Responses door is also measured as its clients call it by default, the
response stored (`store` left out: the worker's SQLite store), as "responses stored"; the
bench's own Responses body sends `store: false`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import harness
from bench.doors import BODIES, E2E, _gateway_config

SITE = Path(__file__).resolve().parent / "gc_probe_site"


# The parts --door-timing reports: each door's own class, then its stream encoder's
_PARTS = ("request", "response", "stream", "chunk", "done")
_CLASSES = {
    "chat": ("OpenAIDoor", "OpenAIStream"),
    "chat again": ("OpenAIDoor", "OpenAIStream"),
    "responses": ("ResponsesDoor", "ResponsesStream"),
    "messages": ("MessagesDoor", "MessagesStream"),
    "responses stored": ("ResponsesDoor", "ResponsesStream"),
}
STORED = {name: value for name, value in BODIES["responses"].items() if name != "store"}


def _door_parts(name: str, before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """CPU ns of each part of `name`'s door code between two readings of the worker's counts."""
    door, encoder = _CLASSES[name]
    out = {}
    for part in _PARTS:
        key = f"{encoder if part in ('chunk', 'done') else door}.{part}"
        out[part] = after["doors"].get(key, [0, 0])[0] - before["doors"].get(key, [0, 0])[0]
    return out


def _threads(pid: int) -> dict[str, tuple[int, str]]:
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ns = int((task / "schedstat").read_text().split()[0])
            name = "event loop" if task.name == str(pid) else (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        out[task.name] = (ns, name)
    return out


def _gc(pid: int, path: Path) -> dict[str, Any]:
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.exists():
            counts: dict[str, Any] = json.loads(path.read_text())
            path.unlink()
            return counts
        time.sleep(0.005)
    raise harness.BenchError("the worker did not report its gc counts")


def probe(
    rounds: int, block: int, door_timing: bool = False, stored: bool = False
) -> dict[tuple[str, bool], dict[str, Any]]:
    from gateway.keys import generate_key, hash_key

    results: dict[tuple[str, bool], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-probe-") as tmp_name:
        tmp = Path(tmp_name)
        procs = harness.Processes()
        try:
            _, sim_port = harness.start_simulator(procs, tmp)
            key, port = generate_key(), harness.free_port()
            config = tmp / "gateway.yaml"
            config.write_text(json.dumps(_gateway_config(sim_port, port, hash_key(key), tmp)))
            counts_path = tmp / "gc.json"
            # This tree after the site module: the site imports the doors before the worker's
            # own path is set, which would otherwise find whatever tree is installed
            env = {
                **os.environ,
                "PYTHONPATH": f"{SITE}{os.pathsep}{harness.ROOT}",
                "TG_GC_PROBE": str(counts_path),
            }
            if door_timing:
                env["TG_DOOR_TIMING"] = "1"
            argv = [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
            ]
            log = tmp / "gateway.log"
            proc = procs.start("gateway", argv, log, env)
            harness.wait_http_ok(f"http://{harness.HOST}:{port}/healthz", proc, "gateway", log)
            headers = {"content-type": "application/json", "authorization": f"Bearer {key}", "x-api-key": key}
            conn = http.client.HTTPConnection(harness.HOST, port, timeout=30)
            names = list(E2E) + (["responses stored"] if stored else [])
            bodies = {**BODIES, "responses stored": STORED}
            paths = {**E2E, "responses stored": E2E["responses"]}
            for index in range(rounds + 1):
                for stream in (False, True):
                    for name in names[index % len(names) :] + names[: index % len(names)]:
                        body = orjson.dumps({**bodies[name], "stream": stream})
                        before_gc = _gc(proc.pid, counts_path)
                        totals: list[int] = []
                        per_thread: dict[str, list[int]] = {}
                        size = 0
                        for _ in range(block):
                            before = _threads(proc.pid)
                            conn.request("POST", paths[name], body, headers)
                            response = conn.getresponse()
                            size = len(response.read())
                            after = _threads(proc.pid)
                            if response.status != 200:
                                raise harness.BenchError(f"{paths[name]}: {response.status}")
                            spent = 0
                            for tid, (ns, thread) in after.items():
                                used = ns - before.get(tid, (0, thread))[0]
                                spent += used
                                per_thread.setdefault(thread, []).append(used)
                            totals.append(spent)
                        after_gc = _gc(proc.pid, counts_path)
                        if index == 0:
                            continue
                        entry = results.setdefault(
                            (name, stream),
                            {
                                "cpu": [],
                                "threads": {},
                                "gc": [0, 0, 0],
                                "gc_ns": 0,
                                "bytes": size,
                                "parts": {},
                            },
                        )
                        for part, ns in _door_parts(name, before_gc, after_gc).items():
                            entry["parts"][part] = entry["parts"].get(part, 0) + ns
                        entry["cpu"] += totals
                        for thread, used_ns in per_thread.items():
                            entry["threads"].setdefault(thread, []).extend(used_ns)
                        for generation in range(3):
                            entry["gc"][generation] += (
                                after_gc["collections"][generation] - before_gc["collections"][generation]
                            )
                        entry["gc_ns"] += sum(after_gc["ns"]) - sum(before_gc["ns"])
            conn.close()
        finally:
            procs.stop_all()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--door-timing", action="store_true", help="time each door's own work in the worker")
    parser.add_argument(
        "--stored", action="store_true", help="also the Responses door with its response stored"
    )
    args = parser.parse_args(argv)
    with harness.machine_lock(max_wait_s=300):
        results = probe(args.rounds, args.block, args.door_timing, args.stored)
    print("| mode | door | CPU/request (median) | event loop thread | other threads (mean) |", end="")
    print(" gc collections/request (gen 0, 1, 2) | gc CPU/request | bytes sent |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, stream), entry in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
        n = len(entry["cpu"])
        loop = statistics.median(entry["threads"].get("event loop", [0])) / 1e3
        others = sum(sum(v) for t, v in entry["threads"].items() if t != "event loop") / n / 1e3
        gcs = ", ".join(f"{c / n:.3f}" for c in entry["gc"])
        mode = "streamed" if stream else "non-streamed"
        cpu = statistics.median(entry["cpu"]) / 1e3
        gc_us = entry["gc_ns"] / n / 1e3
        print(
            f"| {mode} | {name} | {cpu:.1f} µs | {loop:.1f} µs | {others:.1f} µs | {gcs} | {gc_us:.1f} µs"
            f" | {entry['bytes']} |"
        )
    if args.door_timing:
        _print_parts(results)
    return 0


def _print_parts(results: dict[tuple[str, bool], dict[str, Any]]) -> None:
    print()
    print("| mode | door | " + " | ".join(_PARTS) + " | door code | door code - chat's | CPU - chat's |")
    print("|---" * (len(_PARTS) + 6) + "|")
    for stream in (False, True):
        mode = "streamed" if stream else "non-streamed"
        chat = results[("chat", stream)]
        n_chat = len(chat["cpu"])
        chat_code = sum(chat["parts"].values()) / n_chat / 1e3
        chat_cpu = statistics.median(chat["cpu"]) / 1e3
        for name in [name for name in _CLASSES if (name, stream) in results]:
            entry = results[(name, stream)]
            n = len(entry["cpu"])
            parts = [entry["parts"][part] / n / 1e3 for part in _PARTS]
            code = sum(parts)
            cpu = statistics.median(entry["cpu"]) / 1e3
            print(
                f"| {mode} | {name} | "
                + " | ".join(f"{p:.1f} µs" for p in parts)
                + f" | {code:.1f} µs | {code - chat_code:+.1f} µs | {cpu - chat_cpu:+.1f} µs |"
            )


if __name__ == "__main__":
    raise SystemExit(main())
