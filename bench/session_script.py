"""Redis's own CPU per session-record update, and where it goes.

    python -m bench.session_script [--calls N] [--per-call U]

A settle batch updates its sessions' records inside the lease script (`redis_lease.LEASE`):
`redis_sessions.APPLY`'s `apply_sessions` decodes the batch's updates (one JSON argument),
calls `apply_session` once per session, then `index_sessions` once. This runs that code as
the lease script does (U updates a call)
on a redis-server of its own, for 64 sessions turn after turn (the decision-id list full
and trimmed, as in a long session), and reads Redis's own time per call (`INFO
commandstats`, usec_per_call): the figure does not depend on the client or on the machine's
other work the way wall-clock figures do.

The variants take one part of `APPLY` out at a time (its text replaced), so the difference
from "as shipped" is what that part costs: the record's read (HMGET), its write (HSET), the
decision-id list (RPUSH, LTRIM), the expiries (PEXPIRE), the tenant's index (ZADD ...), and
everything ("nothing": the updates passed and decoded, nothing applied).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import orjson
import redis

from adapters.state import redis_sessions
from adapters.state.redis_scripts import PRELUDE
from bench import harness
from bench.leases import start_redis

SESSIONS = 64
# The lease script's call for a batch's session updates (`redis_lease.LEASE`), on its own
_BATCH = """
apply_sessions(ARGV[1], KEYS[1], ARGV[2])
return 1
"""
# Each variant: the text of APPLY taken out, and what stands in its place
_WITHOUT: dict[str, tuple[str, str]] = {
    "the record's read (HMGET)": (
        "local r = redis.call('HMGET', s, 'f', 't', 'i', 'c', 'o', 'u', 'li', 'dd', 'k', 'x', 'dk')",
        "local r = {'1', '1', '1', '1', '1', '1', '1', '0', '0', '9e15', '64'}",
    ),
    # the record written once, when it is made
    "the record's write (HSET)": (
        "  redis.call('HSET', s, unpack(h))\n",
        "  if not r[1] then redis.call('HSET', s, unpack(h)) end\n",
    ),
    "the decision ids (RPUSH, LTRIM)": (
        "local len = #ids > 0 and redis.call('RPUSH', K[2], unpack(ids)) or 0",
        "local len = 0",
    ),
    "the expiries (PEXPIRE)": ("  if renew then\n    left = fmt('%d', left)", "  if false then\n"),
    "the tenant's index (ZADD ...)": ("  if #updates == 0 then return end\n", "  if true then return end\n"),
}


def _variants() -> dict[str, str]:
    out = {"as shipped": redis_sessions.APPLY}
    for name, (old, new) in _WITHOUT.items():
        if old not in redis_sessions.APPLY:
            raise harness.BenchError(f"APPLY has changed: update the variant without {name}")
        out[f"without {name}"] = redis_sessions.APPLY.replace(old, new)
    out["nothing (the updates decoded only)"] = (
        "local function apply_sessions(base, sx, encoded) cjson.decode(encoded) end\n"
    )
    return out


def _update(session: int, turn: int) -> list[str | int]:
    """One turn of a session, as `redis_sessions.folded` gives it (a served turn, one decision)."""
    return [
        f"{session:032x}",
        1,
        1000 + 50 * turn,
        800,
        40,
        1234,
        1000 + 50 * turn,
        950 + 50 * turn,
        1000 + 50 * turn,
        "bench-model",
        "fast",
        0,
        "bench-workflow",
        f"{turn:032x}",
        64,
        3_600_000,
        "",
        0,
        "",
        8,
    ]


def measure(client: redis.Redis, apply: str, calls: int, per_call: int) -> float:
    """Redis's µs per session update for `calls` script calls of `per_call` updates each."""
    sha = client.script_load(PRELUDE + apply + _BATCH)
    base = "tgbench:{t}:"
    client.flushdb()
    client.config_resetstat()
    for call in range(calls):
        updates = []
        for u in range(per_call):
            session = (call * per_call + u) % SESSIONS
            updates.append(_update(session, call * per_call // SESSIONS))
        client.evalsha(sha, 1, base + "sx", base, orjson.dumps(updates))
    stats = client.info("commandstats")["cmdstat_evalsha"]
    return float(stats["usec_per_call"]) / per_call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="script calls per variant")
    parser.add_argument("--per-call", type=int, default=16, help="session updates per call (a batch's)")
    args = parser.parse_args(argv)
    procs = harness.Processes()
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-session-script-") as tmp:
        try:
            port = start_redis(procs, Path(tmp))
            client = redis.Redis(host=harness.HOST, port=port)
            figures = {
                name: measure(client, apply, args.calls, args.per_call) for name, apply in _variants().items()
            }
        finally:
            procs.stop_all()
    shipped = figures["as shipped"]
    print(f"| variant | Redis µs per session update ({args.per_call} a call) | difference |")
    print("|---|---|---|")
    for name, value in figures.items():
        print(f"| {name} | {value:.1f} | {value - shipped:+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
