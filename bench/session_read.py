"""The gateway's CPU per admission read of a session record on Redis, in process.

    python -m bench.session_read [--reads N] [--concurrency C] [--repeats R]

What a turn pays when the worker's record cache is stale (an agent's turns come seconds
apart, so nearly every one reads): `RedisStore.session(decisions=False)`, C at a time, as
admission makes it under load, against the Redis the other session benchmarks use;
the process's CPU time (`time.process_time`) per read, which leaves out Redis's own. It uses
only `RedisStore.session` and `update_session`, so the same file run from an older checkout
measures that revision.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from adapters.state.redis import RedisStore
from bench.sessions_gateway import REDIS_URL, delete_keys
from gateway.sessions.records import SessionUpdate

SESSIONS = 64


async def measure(reads: int, concurrency: int, repeats: int) -> list[float]:
    prefix = f"tgbench-read-{uuid.uuid4().hex[:8]}"
    store = RedisStore(REDIS_URL, prefix)
    try:
        for session in range(SESSIONS):
            update = SessionUpdate(
                "acme", f"s{session}", 1, 100, 40, 10, 500, "chat", "local", 1, "triage", ("d1",), 3, 600
            )
            await store.update_session(update)

        async def read(n: int) -> None:
            for i in range(n):
                await store.session("acme", f"s{i % SESSIONS}", decisions=False)

        each = reads // concurrency
        await asyncio.gather(*(read(10) for _ in range(concurrency)))  # warm
        out = []
        for _ in range(repeats):
            started = time.process_time()
            await asyncio.gather(*(read(each) for _ in range(concurrency)))
            out.append((time.process_time() - started) / (each * concurrency) * 1e6)
        return out
    finally:
        await store.aclose()
        delete_keys(prefix)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=64_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args.reads, args.concurrency, args.repeats))
    shown = ", ".join(f"{f:.1f}" for f in figures)
    print(f"gateway CPU per read: {shown} us (median {statistics.median(figures):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
