"""What the in-process benchmarks share (`spine_inproc.py`, `sessions_inproc.py`): nginx as
the upstream and the trees to compare (this one, and a git revision's checked out beside it),
and a measurement run in a fresh process with a tree's packages first on its path."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def least_of_child(tree: Path, script: str, argv: list[str]) -> float:
    """`script` run as `__main__` with `argv` in a fresh process, `tree` first on its path;
    the least of the figures it prints (a JSON list, its last line)."""
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); "
        f"sys.argv = {[Path(script).stem, *argv]!r}; runpy.run_path({script!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree} {' '.join(argv)}: {done.stderr.strip()[-800:]}")
    return min(json.loads(done.stdout.strip().splitlines()[-1]))


@contextmanager
def upstream_and_trees(base: str | None, prefix: str) -> Iterator[tuple[int, dict[str, Path]]]:
    """nginx's port, and the trees by name ("this", and "base" for `base`'s checkout); both
    stopped and removed when done."""
    from bench import harness
    from bench.leases import base_tree

    procs = harness.Processes()
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    trees = {"this": harness.ROOT}
    try:
        _, port = harness.start_nginx(procs, tmp, 1)
        if base:
            trees["base"] = base_tree(base, tmp)
        yield port, trees
    finally:
        procs.stop_all()
        if "base" in trees:
            remove = ["git", "-C", str(harness.ROOT), "worktree", "remove", "--force", str(trees["base"])]
            subprocess.run(remove, check=False)
