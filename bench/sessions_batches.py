"""Redis's own CPU per settled request in lease settle batches, with and without a session
update riding on each settlement (the record updates the batch's script applies).

    python -m bench.sessions_batches [BATCH] [SESSIONS] [BATCHES]

One lease, batches of BATCH settlements (default 45, about a bench.sessions batch at c64),
each naming one of SESSIONS sessions at random (default 64), BATCHES batches (default 100)
per measure; five measures each way, alternating, medians. Printed only: compare two
checkouts by running it from each, back to back.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import uuid

from adapters.state.redis import RedisStore
from bench.metering import REDIS_URL
from bench.sessions_gateway import delete_keys, redis_cpu_s
from gateway.metering.lease_records import LeaseSync, SettleBatch
from gateway.metering.records import LedgerEntry, Settlement
from gateway.sessions.records import SessionUpdate


def _settlement(session: str | None) -> Settlement:
    update = (
        SessionUpdate(
            "acme", session, 1, 120, 60, 40, 300, "chat", "u", 0, "bench", (uuid.uuid4().hex,), 64, 86400
        )
        if session is not None
        else None
    )
    return Settlement(
        "acme",
        uuid.uuid4().hex,
        (("t:day:x:usd", 300, 2_000_000_000),),
        (),
        LedgerEntry("2026-11-26", "k", "m", 120, 60, 40, 300),
        900,
        session=update,
    )


async def measure(batch: int, sessions: int, batches: int) -> dict[str, float]:
    prefix = f"tgbench-{uuid.uuid4().hex[:8]}"
    store = RedisStore(REDIS_URL, prefix)
    rng = random.Random(1)
    seq = 0

    async def run(with_sessions: bool) -> float:
        nonlocal seq
        before = redis_cpu_s()
        for _ in range(batches):
            seq += 1
            names = [f"s{rng.randrange(sessions):02d}" if with_sessions else None for _ in range(batch)]
            settlements = tuple(_settlement(name) for name in names)
            batched = SettleBatch(uuid.uuid4().hex, settlements, 900)
            await store.lease(LeaseSync("acme", "lease-1", seq, 60, (), (), batched))
        return 1e6 * (redis_cpu_s() - before) / (batch * batches)

    try:
        await run(True)  # the records made, the scripts loaded
        off, on = [], []
        for _ in range(5):
            off.append(await run(False))
            on.append(await run(True))
    finally:
        await store.aclose()
        delete_keys(prefix)
    return {"off_us": statistics.median(off), "on_us": statistics.median(on)}


def main(argv: list[str]) -> int:
    batch, sessions, batches = (int(a) for a in (argv + ["45", "64", "100"][len(argv) :])[:3])
    got = asyncio.run(measure(batch, sessions, batches))
    print(
        f"batches of {batch} over {sessions} sessions: Redis CPU per settled request "
        f"{got['off_us']:.2f} us without session updates, {got['on_us']:.2f} us with, "
        f"added {got['on_us'] - got['off_us']:.2f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
