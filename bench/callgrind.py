"""Machine instructions per request, by function, compiled code and C libraries included.

    python -m bench.callgrind [--pipeline spine|whole|sessions] [--base-tree PATH] [--requests N] [--top K]
                              [--cache-sim [--ll-kb KB]]

`bench.opcodes` counts the Python bytecode a request executes; on the compiled build (the
image's: `scripts/compile.sh`) most of the request path is native code it cannot see. This
runs the same in-process applications (`spine_inproc`, `sessions_inproc`) under valgrind's
callgrind, which counts every instruction the process executes (the compiled modules'
functions, the interpreter's C API, orjson, Hyperscan, OpenSSL, glibc): a count the
machine's load does not move. Each tree's child runs twice, with N and 3N measured requests
after the same start-up and warm-up, and the difference of the two counts, per function,
divided by 2N is what a request costs (start-up, which the two runs share, cancels out).

Reading it: instructions are not time (a cache miss costs no instruction), and valgrind
hides CPU features from the libraries it runs (OpenSSL's SHA extensions among them: a
digest counts several times what it costs on the CPU), so compare a function's count
between two trees rather than across libraries. Under valgrind a request takes some 50
times as long, so what depends on the clock weighs more than at full speed: a lease's
batch window carries fewer requests. (A session record's cache entry is kept 50 times as
long as `sessions.cache_s`'s default, so that it serves as many requests as at full speed.)

regopy's allocator does not start under valgrind, so the whole pipeline's policy is asked of
the OPA-protocol test server (tests/policy/opa_server.py, regopy outside valgrind), its
decisions cached for the run as regopy's would be. `--base-tree` is another checkout (compiled
or not, as this one) of a revision that loads regopy only for `policy.engine: rego`.

`--cache-sim` also simulates the caches (callgrind's `--cache-sim=yes`: a first level of
instructions and of data, and a last level sized as this machine's L2 by default, `--ll-kb`)
and counts, per request and by function, the reads and writes that missed the last level:
where a pipeline's instructions wait on memory. A simulation of this process alone, on one
core: the other worker, Redis and the load generator, which share the real caches, are not in
it, so read it as where the request's own working set outgrows the cache, not as the misses
of a loaded machine.

Needs `valgrind` (with `callgrind_annotate`); about 2 minutes a tree for the whole pipeline
(several times as long with `--cache-sim`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench import harness
from bench.inproc import run_child
from bench.opcodes import CONCURRENCY

SLOWDOWN = 50  # about how much longer a request takes under callgrind
SESSION_CACHE_S = 1.0  # sessions.cache_s's default
_COUNTED = re.compile(r"\s*([\d,]+) \([^)]*\)\s+(.*)$")
_LL_MISSES = ("ILmr", "DLmr", "DLmw")  # callgrind's last-level misses: instruction reads, data reads, writes


def child(pipeline: str, port: int, requests: int, opa_url: str) -> None:
    """In the tree on sys.path (run under valgrind): the pipeline's app, warmed up, then
    `requests` requests."""
    if pipeline == "spine":
        from bench import spine_inproc

        spine_inproc.child(port, requests, 1)
    else:
        from bench import sessions_inproc

        variant = "on" if pipeline == "sessions" else "off"
        # A record read stays cached for as many requests as at full speed, not 50 times fewer.
        stretched = SESSION_CACHE_S * SLOWDOWN
        sessions_inproc.child(port, variant, requests, 1, CONCURRENCY, opa_url, stretched)


def by_function(annotated: str, inclusive: bool) -> dict[str, int]:
    """`callgrind_annotate`'s table as {"file:function": instructions}. Code valgrind could
    not name (an address in a library without symbols) counts as its library's in the own
    counts, and is left out of the inclusive ones."""
    counts: dict[str, int] = {}
    for line in annotated.splitlines():
        found = _COUNTED.match(line)
        if found is None or "PROGRAM TOTALS" in line:
            continue
        shown = found.group(2)
        name = re.sub(r"\s*\[[^\]]*\]\s*$", "", shown).strip()  # without the library's path
        count = int(found.group(1).replace(",", ""))
        if "???:" in name:
            if inclusive:
                continue
            library = re.search(r"\[([^\]]*)\]\s*$", shown)
            name = f"{Path(library.group(1)).name if library else '?'} (no symbols)"
            counts[name] = counts.get(name, 0) + count
            continue
        name = name.rsplit("/", 1)[-1]  # the source file's name, without the build's directories
        # A function shown twice (by absolute and relative path) is one: keep one count.
        counts[name] = max(counts.get(name, 0), count)
    return counts


def last_level_kb() -> int:
    """This machine's L2 size in KB (the last level the simulation models), else 512."""
    size = Path("/sys/devices/system/cpu/cpu0/cache/index2/size")
    try:
        text = size.read_text().strip()
    except OSError:
        return 512
    return int(text[:-1]) * 1024 if text.endswith("M") else int(text.rstrip("K"))


def cache_options(ll_kb: int) -> list[str]:
    """callgrind's cache simulation, its last level `ll_kb` KB (8-way, 64-byte lines)."""
    return ["--cache-sim=yes", f"--LL={ll_kb * 1024},8,64", "--I1=32768,8,64", "--D1=32768,8,64"]


def counted(
    tree: Path, pipeline: str, port: int, opa_url: str, requests: int, tmp: Path, ll_kb: int = 0
) -> dict[str, dict[str, float]]:
    """Instructions per request by function in `tree`: {"self": ..., "inclusive": ...}; with
    `ll_kb` (a simulated last level of that size), also "misses": its misses by function."""
    runs: list[dict[str, dict[str, int]]] = []
    for measured in (requests, 3 * requests):
        out = tmp / f"{tree.name}-{pipeline}-{measured}.callgrind"
        argv = ["--child", "--pipeline", pipeline, "--port", str(port), "--requests", str(measured)]
        run_child(
            tree,
            __file__,
            [*argv, "--opa-url", opa_url],
            # One hash seed, so that dicts and sets probe alike in every run: one tree measured
            # twice differed by 0.8 % with random seeds (in dict look-ups), by 0.18 % with one.
            prefix=[
                "env",
                "PYTHONHASHSEED=0",
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                *(cache_options(ll_kb) if ll_kb else ()),
            ],
        )
        tables = {}
        for kind in ("self", "inclusive"):
            inclusive = "yes" if kind == "inclusive" else "no"
            annotate = ["callgrind_annotate", "--auto=no", f"--inclusive={inclusive}", "--threshold=100"]
            if ll_kb:
                annotate.append("--show=Ir")
            done = subprocess.run([*annotate, str(out)], capture_output=True, text=True, check=True)
            tables[kind] = by_function(done.stdout, kind == "inclusive")
        if ll_kb:
            misses: dict[str, int] = {}
            for event in _LL_MISSES:
                annotate = ["callgrind_annotate", "--auto=no", "--inclusive=no", "--threshold=100"]
                done = subprocess.run(
                    [*annotate, f"--show={event}", f"--sort={event}", str(out)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                for name, count in by_function(done.stdout, False).items():
                    misses[name] = misses.get(name, 0) + count
            tables["misses"] = misses
        runs.append(tables)
    each = (3 * requests // CONCURRENCY - requests // CONCURRENCY) * CONCURRENCY  # as the children round
    return {
        kind: {
            name: (runs[1][kind].get(name, 0) - runs[0][kind].get(name, 0)) / each
            for name in runs[0][kind].keys() | runs[1][kind].keys()
        }
        for kind in runs[0]
    }


def print_table(title: str, counts: dict[str, float], top: int, only: str = "") -> None:
    print(f"-- {title}")
    ranked = sorted(((v, k) for k, v in counts.items() if only in k), reverse=True)
    for value, name in ranked[:top]:
        print(f"{value:11,.0f}  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.callgrind")
    parser.add_argument("--pipeline", choices=("spine", "whole", "sessions"), default="whole")
    parser.add_argument("--base-tree", help="also this checkout's pipeline, and the difference")
    parser.add_argument("--requests", type=int, default=640, help="measured requests, shorter run (>= 64)")
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--cache-sim", action="store_true", help="also last-level cache misses, simulated")
    parser.add_argument("--ll-kb", type=int, help="the simulated last level in KB (default: this L2's)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--opa-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    ll_kb = (args.ll_kb or last_level_kb()) if args.cache_sim else 0
    if args.child:
        child(args.pipeline, args.port, args.requests, args.opa_url)
        return 0
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install -y valgrind)")
    from bench.inproc import upstream_and_trees
    from bench.metering import policy_dir
    from bench.policy import start_opa_server

    trees: dict[str, Path] = {}
    with (
        harness.machine_lock(),
        upstream_and_trees(None, "tollgate-bench-callgrind-") as (port, found),
        tempfile.TemporaryDirectory(prefix="tollgate-bench-callgrind-") as kept,  # the profiles: large
    ):
        tmp = Path(kept)
        trees["this"] = found["this"]
        if args.base_tree:
            trees["base"] = Path(args.base_tree)
        with start_opa_server(policy_dir(tmp)) as opa_url:
            by_tree = {
                name: counted(tree, args.pipeline, port, opa_url, args.requests, tmp, ll_kb)
                for name, tree in trees.items()
            }
    this = by_tree["this"]
    for name, counts in by_tree.items():
        total = sum(counts["self"].values())
        print(f"{name}: {total:,.0f} instructions a request ({args.pipeline})")
        if ll_kb:
            missed = sum(counts["misses"].values())
            print(f"{name}: {missed:,.1f} misses a request of a {ll_kb} KB last level ({args.pipeline})")
    if "base" not in by_tree:
        print_table("own instructions a request, by function", this["self"], args.top)
        print_table("the gateway's compiled functions, inclusive", this["inclusive"], args.top, "CPyDef_")
        if ll_kb:
            title = f"misses of the {ll_kb} KB last level a request, by function"
            print_table(title, this["misses"], args.top)
        return 0
    base = by_tree["base"]
    change_total = sum(this["self"].values()) - sum(base["self"].values())
    print(f"this - base: {change_total:+,.0f} instructions a request")
    for kind in ("self", "inclusive", *(("misses",) if ll_kb else ())):
        names = this[kind].keys() | base[kind].keys()
        change = {n: this[kind].get(n, 0.0) - base[kind].get(n, 0.0) for n in names}
        ranked = sorted(change.items(), key=lambda item: -abs(item[1]))[: args.top]
        print(f"-- {kind}: this - base")
        for name, delta in ranked:
            before, after = base[kind].get(name, 0.0), this[kind].get(name, 0.0)
            print(f"{delta:+11,.0f}  {name}  ({before:,.0f} -> {after:,.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
