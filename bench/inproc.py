"""What the in-process benchmarks share (`spine_inproc.py`, `sessions_inproc.py`): nginx as
the upstream and the trees to compare (this one, and a git revision's checked out beside it),
a measurement run in a fresh process with a tree's packages first on its path, and, in that
process, the app driven with concurrent requests (`drive`; a child runs this file by its
path, `runpy.run_path`: it has another tree's `bench` first on its path, which may not have it)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def run_child(tree: Path | str, script: str, argv: list[str], prefix: Sequence[str] = ()) -> str:
    """`script` run as `__main__` with `argv` in a fresh process, `tree` first on its path
    (by its path: the other tree's `bench` package may not have it), under the command
    `prefix` if any (valgrind); what it printed."""
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); "
        f"sys.argv = {[Path(script).stem, *argv]!r}; runpy.run_path({script!r}, run_name='__main__')"
    )
    done = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree} {' '.join(argv)}: {done.stderr.strip()[-800:]}")
    return done.stdout


def least_of_child(tree: Path, script: str, argv: list[str]) -> float:
    """`script` run as `__main__` with `argv` in a fresh process, `tree` first on its path;
    the least of the figures it prints (a JSON list, its last line)."""
    return float(min(json.loads(run_child(tree, script, argv).strip().splitlines()[-1])))


@contextmanager
def upstream_and_trees(
    base: str | None, prefix: str, prepared: str | None = None
) -> Iterator[tuple[int, dict[str, Path]]]:
    """nginx's port, and the trees by name ("this", and "base" for `base`'s checkout: a fresh,
    plain worktree, or `prepared`, a checkout of it made and compiled beforehand, left as it
    is); nginx stopped and a fresh worktree removed when done."""
    from bench import harness
    from bench.leases import base_tree

    procs = harness.Processes()
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    trees = {"this": harness.ROOT}
    try:
        _, port = harness.start_nginx(procs, tmp, 1)
        if base:
            trees["base"] = Path(prepared) if prepared else base_tree(base, tmp)
        yield port, trees
    finally:
        procs.stop_all()
        if "base" in trees and not prepared:
            remove = ["git", "-C", str(harness.ROOT), "worktree", "remove", "--force", str(trees["base"])]
            subprocess.run(remove, check=False)


async def drive(
    app: Any,
    scope_of: Callable[[], dict[str, Any]],
    body: bytes,
    requests: int,
    rounds: int,
    warm_up: int,
    after_start: Callable[[], None],
    concurrency: int = 64,
) -> list[float]:
    """An ASGI app's lifespan started (then `after_start()`), `warm_up` requests on each of
    `concurrency` clients, then `rounds` rounds of `requests`, each request `body` POSTed with
    the scope `scope_of()` gives; the process's CPU us per request of each round. Any answer
    but 200 stops the run."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    inbox.put_nowait({"type": "lifespan.startup"})
    lifespan = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, outbox.put))
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the gateway did not start: {started}")
    after_start()
    statuses: set[int] = set()

    async def one() -> None:
        received = False

        async def receive() -> dict[str, Any]:
            nonlocal received
            if not received:
                received = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # never disconnects
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.add(message["status"])

        await app(scope_of(), receive, send)

    async def client(count: int) -> None:
        for _ in range(count):
            await one()

    await asyncio.gather(*(client(warm_up) for _ in range(concurrency)))
    each = max(requests // concurrency, 1)
    figures = []
    for _ in range(rounds):
        began = time.process_time()
        await asyncio.gather(*(client(each) for _ in range(concurrency)))
        figures.append(1e6 * (time.process_time() - began) / (each * concurrency))
    if statuses != {200}:
        raise SystemExit(f"answers other than 200: {statuses}")
    inbox.put_nowait({"type": "lifespan.shutdown"})
    await lifespan
    return figures
