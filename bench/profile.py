"""py-spy on one gateway worker under wrk load, and what its samples say (`python -m
bench.overhead --profile`): own time by function (C frames folded into their Python caller),
inclusive time below the ASGI entry, and own time by package.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import (
    ROOT,
    WRK_SLACK_S,
    BenchError,
    Server,
    Stack,
    run_header,
    stop_group,
    wait_quiet,
    write_wrk_script,
    wrk,
)


def profile(
    stack: Stack, gateway: Server, args: argparse.Namespace, run_dir: Path, script: Path | None = None
) -> dict[str, Any]:
    """`script`: wrk's script for the load (default: the benchmark's chat request). With
    `args.perf`, Linux perf samples the worker instead of py-spy (`perf_profile`)."""
    use_perf = getattr(args, "perf", False)
    if use_perf:
        sampler = shutil.which("perf")
        if sampler is None:
            raise BenchError("perf is not installed (apt-get install linux-perf)")
    else:
        # a virtualenv's py-spy is beside its python, whether or not the venv is on PATH
        sampler = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if sampler is None:
            raise BenchError("py-spy is not installed (pip install py-spy)")
    script = script or write_wrk_script(stack)
    wrk(gateway.url, script, 64, args.warmup)
    wait_quiet()
    worker = gateway.worker_pids()[0]
    raw = run_dir / "profile-raw.txt"
    seconds = args.profile_seconds
    load = subprocess.Popen(
        [
            "wrk",
            "-t2",
            "-c64",
            f"-d{round(seconds) + 4}s",
            "--timeout",
            "5s",
            "-s",
            str(script),
            gateway.url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(1.0)
        if use_perf:
            return perf_profile(sampler, worker, seconds, run_dir, load)
        argv = [
            sampler,
            "record",
            "--pid",
            str(worker),
            "--duration",
            str(round(seconds)),
            "--rate",
            str(args.profile_rate),
        ]
        argv += ["--format", "raw", "--output", str(raw), "--threads"]
        if args.native:
            argv.append("--native")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
        if done.returncode != 0 or not raw.exists():
            raise BenchError(f"py-spy failed ({done.returncode}): {done.stderr.strip()[-800:]}")
        load.wait(timeout=seconds + WRK_SLACK_S)
    finally:
        if load.poll() is None:
            stop_group(load)
    return analyse_profile(raw)


def perf_profile(
    perf: str, worker: int, seconds: float, run_dir: Path, load: subprocess.Popen[bytes]
) -> dict[str, Any]:
    """Linux perf's samples of the worker process, without call stacks: own time by thread, by
    shared object and by symbol. It sees what py-spy cannot: the compiled modules' functions
    (`CPyDef_...` in the `gateway._native` library), the interpreter's, the C libraries' and
    the kernel's (interpreted code shows only as the interpreter's loop: py-spy sees that)."""
    data = run_dir / "perf.data"
    record = [perf, "record", "-e", "cpu-clock", "-F", "997", "-p", str(worker), "-o", str(data)]
    done = subprocess.run(
        [*record, "--", "sleep", str(round(seconds))],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=False,
    )
    if done.returncode != 0 or not data.exists():
        raise BenchError(f"perf record failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    load.wait(timeout=seconds + WRK_SLACK_S)

    def report(sort: str) -> list[list[str]]:
        argv = [perf, "report", "-i", str(data), "--stdio", "--no-children", "--sort", sort]
        argv += ["-F", f"overhead,{sort}", "-g", "none"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        rows = [line.split() for line in done.stdout.splitlines()]
        return [fields for fields in rows if len(fields) >= 2 and fields[0].endswith("%")]

    by_symbol: collections.defaultdict[str, float] = collections.defaultdict(float)
    by_object: collections.defaultdict[str, float] = collections.defaultdict(float)
    for fields in report("dso,sym"):
        if len(fields) < 3:
            continue
        share = float(fields[0].rstrip("%"))
        obj, symbol = fields[1], " ".join(fields[2:]).removeprefix("[.] ").removeprefix("[k] ")
        by_symbol[f"{symbol} ({obj})"] += share
        by_object[obj] += share
    by_thread: collections.defaultdict[str, float] = collections.defaultdict(float)  # "pid": a thread's id
    for fields in report("pid"):
        by_thread[" ".join(fields[1:])] += float(fields[0].rstrip("%"))

    def table(shares: dict[str, float]) -> list[dict[str, Any]]:
        ranked = sorted(shares.items(), key=lambda item: item[1], reverse=True)[:60]
        return [{"function": k, "samples": 0, "pct": v} for k, v in ranked]

    return {
        "samples": 0,
        "self": table(by_symbol),
        "areas": table(by_object),
        "threads": table(by_thread),
        "raw": str(data),
    }


def _frame(frame: str) -> tuple[str, str]:
    """'func (path/to/file.py:123)' -> ('func', 'short/path.py')."""
    name, _, where = frame.rpartition(" (")
    if not name:
        return frame, ""
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "lib/python3.11/", f"{ROOT}/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return name, path


def _area(path: str) -> str:
    top = path.split("/", 1)[0]
    if path.startswith(("gateway/", "adapters/")):
        return top
    if top in (
        "uvicorn",
        "aiohttp",
        "yarl",
        "multidict",
        "uvloop",
        "httptools",
        "logging",
        "asyncio",
        "orjson",
    ):
        return top
    if top.endswith(".so") or not path:
        return "native"
    return "other (stdlib etc.)"


def analyse_profile(raw: Path, top: int = 25) -> dict[str, Any]:
    """Own time, inclusive time and time per area, over the event-loop thread's samples only
    (uvicorn's worker also runs a thread that answers the supervisor's pings)."""
    by_thread: dict[str, list[tuple[list[tuple[str, str]], int]]] = {}
    for line in raw.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        parts = stack_text.split(";")
        thread = next((p for p in parts if p.startswith("thread ")), "thread ?")
        frames = [_frame(p) for p in parts if p and not p.startswith(("process ", "thread "))]
        if frames:
            by_thread.setdefault(thread, []).append((frames, int(count_text)))

    def is_loop(samples: list[tuple[list[tuple[str, str]], int]]) -> bool:
        return any(name in ("Server.run", "asyncio_run", "Runner.run") for fs, _ in samples for name, _ in fs)

    loop_threads = [t for t, samples in by_thread.items() if is_loop(samples)]
    own: Counter[str] = Counter()
    own_python: Counter[str] = Counter()  # native frames folded into their nearest Python caller
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = other = 0
    for thread, samples in by_thread.items():
        for frames, count in samples:
            if thread not in loop_threads:
                other += count
                continue
            total += count
            name, path = frames[-1]
            own[f"{name} ({path})"] += count
            py_name, py_path = next(((n, p) for n, p in reversed(frames) if p.endswith(".py")), (name, path))
            own_python[f"{py_name} ({py_path})"] += count
            areas[_area(py_path)] += count
            for label in {f"{n} ({p})" for n, p in frames if p.endswith(".py")}:
                inclusive[label] += count

    def table(counter: Counter[str], below_pct: float = 100.0) -> list[dict[str, Any]]:
        share = {k: 100 * v / max(total, 1) for k, v in counter.items()}
        kept = [k for k, _ in counter.most_common() if share[k] <= below_pct][:top]
        return [{"function": k, "samples": counter[k], "pct": share[k]} for k in kept]

    return {
        "samples": total,
        "other_thread_samples": other,
        "self": table(own),
        "self_python": table(own_python),
        # Python frames only, without the wrappers every sample goes through (server, loop, ASGI entry).
        "inclusive": table(inclusive, below_pct=85.0),
        "areas": table(areas),
        "raw": str(raw),
    }


def profile_section(
    meta: dict[str, Any], prof: dict[str, Any], settings: dict[str, Any], args: argparse.Namespace
) -> str:
    native = "with" if args.native else "without"
    lines = [
        "## Where a worker spends its time",
        "",
        run_header(meta)
        + f"- py-spy record ({native} --native, {args.profile_rate} Hz) on one of {settings['workers']} "
        f"workers for {args.profile_seconds:.0f} s under wrk c64, access log "
        f"{'on' if settings['access_log'] else 'off'}; {prof['samples']} samples of the event-loop thread "
        "(uvicorn's ping thread left out)",
        "",
        "| # | own time, C frames folded into their Python caller | % of samples |",
        "|---|---|---|",
    ]
    lines += [
        f"| {i} | `{r['function']}` | {r['pct']:.1f} |" for i, r in enumerate(prof["self_python"][:10], 1)
    ]
    lines += ["", "| inclusive time (Python frames, below the ASGI entry) | % of samples |", "|---|---|"]
    lines += [f"| `{row['function']}` | {row['pct']:.1f} |" for row in prof["inclusive"][:20]]
    lines += ["", "| area (own time, by package) | % of samples |", "|---|---|"]
    lines += [f"| {row['function']} | {row['pct']:.1f} |" for row in prof["areas"]]
    lines += ["", f"Raw stacks: `{prof['raw']}` (collapsed format; feed to any flamegraph tool)."]
    return "\n".join(lines)
