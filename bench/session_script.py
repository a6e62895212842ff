"""Redis's own CPU per session turn, by how often the session's record is read.

    python -m bench.session_script [--calls N] [--per-call U] [--agents S]

A settle batch records its sessions' turns inside the lease script (`redis_lease.LEASE`,
`redis_sessions.APPLY`); the record is read at admission, through each worker's record cache,
so a session's turns come between two reads one at a time (an agent's turns, seconds apart:
every turn reads) or many (a busy session whose worker's cache is fresh). This runs the
update script (`redis_sessions.update_script`, U updates a call, as a batch's) and the read
admission makes (a `GET` of the packed record; in older revisions `redis_sessions.light_read`,
or the record's script without the decision ids) on a redis-server of its own: for 64
sessions turn after turn (the decision-id list full and trimmed, as in a long session), each
session's record read once every R of its turns; for S sessions whose turns each come more
than a second after the last, each read at admission (an agent's turns); then a read alone,
by the record's script and as admission makes it. It reads Redis's own time for all of it
(`INFO commandstats`): the figure does not depend on the client or on the machine's other
work the way wall-clock figures do.

It uses only what every revision since the updates went as one JSON argument has
(`update_script`, `GET`, `keys`, `encoded`), so the same file run from an older checkout
measures that revision.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import redis

from adapters.state import redis_sessions
from adapters.state.redis_scripts import PRELUDE
from bench import harness
from bench.leases import start_redis
from gateway.sessions.records import SessionUpdate

SESSIONS = 64
READS_EVERY = (1, 4, 16, 0)  # turns of a session between two reads of its record; 0: never read


def _update(session: int, turn: int) -> SessionUpdate:
    """One served turn of a session with one decision."""
    return SessionUpdate(
        "t",
        f"{session:032x}",
        1,
        1000 + 50 * turn,
        800,
        40,
        1234,
        "bench-model",
        "fast",
        0,
        "bench-workflow",
        (f"{turn:032x}",),
        64,
        3600,
    )


def _script_read(client: redis.Redis, get: str, base: str, session: int) -> None:
    """The record's script without the decision ids."""
    keys = redis_sessions.keys(base, f"{session:032x}")
    client.evalsha(get, len(keys), *keys, 0)


def _read(client: redis.Redis, get: str, base: str, session: int) -> None:
    """A read as admission makes it: a GET of the packed record (then its checkpoints when it
    holds any) where the revision reads so, else (and for a session with no packed record) a
    transaction of plain commands where the revision has one (`light_read`), else the
    record's script without the decision ids."""
    keys = redis_sessions.keys(base, f"{session:032x}")
    if hasattr(redis_sessions, "holds_checkpoints"):
        packed = client.get(keys[0])
        if packed is not None:
            if redis_sessions.holds_checkpoints(redis_sessions.unpacked(packed)):
                client.lrange(keys[2], 0, -1)
            return
    light_read = getattr(redis_sessions, "light_read", None)
    if light_read is None:
        _script_read(client, get, base, session)
        return
    pipe = client.pipeline(transaction=True)
    for command in light_read(keys):
        pipe.execute_command(*command)
    pipe.execute()


def _usec(client: redis.Redis) -> float:
    """Redis's time in commands since the stats were reset (its own reset left out)."""
    stats = client.info("commandstats")
    return float(sum(v["usec"] for name, v in stats.items() if "config" not in name))


def measure(client: redis.Redis, calls: int, per_call: int, reads_every: int) -> float:
    """Redis's µs per turn, updates and reads together, for SESSIONS sessions turn after turn."""
    update = client.script_load(redis_sessions.update_script(PRELUDE))
    get = client.script_load(redis_sessions.GET)
    base = "tgbench:{t}:"
    client.flushdb()
    client.config_resetstat()
    for call in range(calls):
        batch = [_update(n % SESSIONS, n // SESSIONS) for n in range(call * per_call, (call + 1) * per_call)]
        client.evalsha(update, 1, base + "sx", base, redis_sessions.encoded(batch))
        for n in range(call * per_call, (call + 1) * per_call):
            if reads_every and (n // SESSIONS) % reads_every == reads_every - 1:
                _read(client, get, base, n % SESSIONS)
    return _usec(client) / (calls * per_call)


def measure_agents(client: redis.Redis, sessions: int, per_call: int) -> float:
    """Redis's µs per turn, update and read, for turns that each come more than a second after
    their session's last (records made beforehand, not counted), each read at admission."""
    update = client.script_load(redis_sessions.update_script(PRELUDE))
    get = client.script_load(redis_sessions.GET)
    base = "tgbench:{t}:"
    client.flushdb()
    for turn in range(2):
        if turn == 1:
            time.sleep(1.2)
            client.config_resetstat()
        for first in range(0, sessions, per_call):
            batch = [_update(n, turn) for n in range(first, min(sessions, first + per_call))]
            for n in range(first, min(sessions, first + per_call)):
                _read(client, get, base, n)
            client.evalsha(update, 1, base + "sx", base, redis_sessions.encoded(batch))
    return _usec(client) / sessions


def measure_reads(client: redis.Redis, reads: int) -> dict[str, float]:
    """Redis's µs per read of a long session's record without its decision ids: by the
    record's script, and as admission reads it (where the revision has `light_read`)."""
    update = client.script_load(redis_sessions.update_script(PRELUDE))
    get = client.script_load(redis_sessions.GET)
    base = "tgbench:{t}:"
    client.flushdb()
    for turn in range(80):  # the decision-id list full and trimmed
        batch = [_update(session, turn) for session in range(SESSIONS)]
        client.evalsha(update, 1, base + "sx", base, redis_sessions.encoded(batch))
    out = {}
    client.config_resetstat()
    for n in range(reads):
        _script_read(client, get, base, n % SESSIONS)
    out["the record's script"] = _usec(client) / reads
    if hasattr(redis_sessions, "light_read"):
        client.config_resetstat()
        for n in range(reads):
            _read(client, get, base, n % SESSIONS)
        out["as admission reads it"] = _usec(client) / reads
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="update script calls per variant")
    parser.add_argument("--per-call", type=int, default=16, help="session updates per call (a batch's)")
    parser.add_argument("--agents", type=int, default=4096, help="sessions of the agents' case")
    args = parser.parse_args(argv)
    procs = harness.Processes()
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-session-script-") as tmp:
        try:
            port = start_redis(procs, Path(tmp))
            client = redis.Redis(host=harness.HOST, port=port)
            figures = {every: measure(client, args.calls, args.per_call, every) for every in READS_EVERY}
            agents = measure_agents(client, args.agents, args.per_call)
            reads = measure_reads(client, args.calls)
        finally:
            procs.stop_all()
    print(f"| a session's record read | Redis µs per turn, updates ({args.per_call} a call) and reads |")
    print("|---|---|")
    for every, value in figures.items():
        when = "never" if every == 0 else "every turn" if every == 1 else f"once every {every} turns"
        print(f"| {SESSIONS} sessions turn after turn, read {when} | {value:.1f} |")
    agents_case = f"{args.agents} sessions, each turn over a second after the last, read every turn"
    print(f"| {agents_case} | {agents:.1f} |")
    print()
    print("| a record's read without its decision ids | Redis µs per read |")
    print("|---|---|")
    for way, value in reads.items():
        print(f"| {way} | {value:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
