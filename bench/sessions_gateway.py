"""bench.sessions, the whole pipeline with and without sessions: wrk c64 against one gateway
(2 workers: Redis metering with a budget, the shipped policy, redaction masking both ways, the
decision log, metrics), every request naming one of 64 sessions (or `sessions` of them: with
thousands, as many agents each sending a turn now and then would, nearly every turn misses
the worker's record cache and reads its record), `sessions.enabled` false and true. Both
gateways stay up side by side; rounds of short wrk runs alternate between them (off then on,
on then off, ...) so a drift of the machine's load falls on both alike; each round's pair
gives a ratio of gateway CPU per request, and the figures are the medians.

`profile_gateway` instead runs py-spy on one worker of one variant under that load
(`bench/profile.py`), for an off-vs-on comparison of where a worker spends its time.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench import harness as spine
from bench.metering import REDIS_URL, gateway_config, policy_dir
from bench.profile import profile
from gateway.keys import generate_key, hash_key

SESSION_WRK_SCRIPT = (
    spine.WRK_SCRIPT
    + """
local sent = 0
request = function()
  sent = sent + 1
  wrk.headers["X-Session-Id"] = "bench-session-" .. (sent % {sessions})
  return wrk.format()
end
"""
)


def delete_keys(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def redis_cpu_s() -> float:
    """CPU seconds the Redis server has used (user + system)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        info = client.info("cpu")
    finally:
        client.close()
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_command_s() -> float:
    """Seconds the Redis server has spent in commands (`INFO commandstats`): its work on the
    records and budgets themselves, without the network I/O its CPU also counts; clock time,
    so a command preempted by the machine's other work counts the wait too."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return sum(float(v["usec"]) for v in stats.values()) / 1e6


def _with_gateways(
    run: Callable[[spine.Stack, Callable[[bool], None], Path], Any], sessions: int = 64, hold_s: float = 0.0
) -> Any:
    """`run(stack, start, script)` with the upstream up; `start(enabled)` serves a gateway with
    sessions on (`sessions.update_hold_s` = `hold_s`) or off as `stack.gateway`."""
    procs = spine.Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-sessions-"))
    key = generate_key()
    prefix = f"tgbench-{uuid.uuid4().hex[:8]}"
    state = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": prefix}
    policy = policy_dir(tmp)
    try:
        stack = spine.start_stack(procs, tmp, "auto", 1)
        stack = dataclasses.replace(stack, api_key=key)

        def start(enabled: bool) -> None:
            def config(port: int) -> dict[str, Any]:
                data = gateway_config(stack, port, hash_key(key), state, policy)
                sessions: dict[str, Any] = {"enabled": enabled}
                if enabled and hold_s:  # (named only when set: earlier revisions do not know it)
                    sessions["update_hold_s"] = hold_s
                return {**data, "sessions": sessions}

            spine.serve_gateway(stack, f"sessions-{enabled}", config)

        script = tmp / "sessions.lua"
        script.write_text(SESSION_WRK_SCRIPT.format(body=spine.CHAT_BODY, key=key, sessions=sessions))
        return run(stack, start, script)
    finally:
        procs.stop_all()
        delete_keys(prefix)


def gateway_figures(rounds: int, seconds: float, sessions: int = 64, hold_s: float = 0.0) -> dict[str, Any]:
    """Both gateways started once and kept up, then `rounds` pairs of wrk runs of `seconds`
    each, one against each gateway back to back, the order alternating: many short paired
    runs rather than a few long ones, so a change in the machine's load falls on both sides
    of a pair alike."""

    def measure(stack: spine.Stack, start: Callable[[bool], None], script: Path) -> dict[str, Any]:
        servers: dict[str, tuple[Any, str]] = {}
        for name in ("off", "on"):
            start(name == "on")
            assert stack.gateway is not None
            servers[name] = (stack.gateway, stack.gateway_url)
            stack.gateway = None
        for _, url in servers.values():
            # A fresh gateway's first seconds cost more (connections opened, caches filled).
            spine.wrk(url, script, 64, spine.WARMUP_S)
        rps: dict[str, list[float]] = {"off": [], "on": []}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        store: dict[str, list[float]] = {"off": [], "on": []}
        commands: dict[str, list[float]] = {"off": [], "on": []}
        for n in range(rounds):
            for name in ("off", "on") if n % 2 == 0 else ("on", "off"):
                proc, url = servers[name]
                before, executing = redis_cpu_s(), redis_command_s()
                run = spine.served_load(url, proc.pid, script, 64, seconds)
                done = max(run["requests"], 1)
                store[name].append(1000 * (redis_cpu_s() - before) / done)
                commands[name].append(1000 * (redis_command_s() - executing) / done)
                if run["errors"] or run.get("non2xx"):
                    raise spine.BenchError(f"{name}: wrk saw errors: {run}")
                rps[name].append(run["rps"])
                cpu[name].append(run["cpu_ms_per_request"])
        ratios = [on / off for on, off in zip(cpu["on"], cpu["off"], strict=True)]
        return {
            "upstream": stack.upstream_kind,
            "seconds": seconds,
            "rps": {name: statistics.median(v) for name, v in rps.items()},
            "cpu_ms_per_request": {name: statistics.median(v) for name, v in cpu.items()},
            "runs": rps,
            "cpu_runs": cpu,
            # The Redis server's CPU per request (the metering and the session records it keeps).
            "redis_cpu_ms_per_request": {name: statistics.median(v) for name, v in store.items()},
            # Its time in commands (clock time: no network I/O, but a preempted command's wait).
            "redis_command_ms_per_request": {name: statistics.median(v) for name, v in commands.items()},
            # Each round's on / off pair, run back to back: the least disturbed comparison.
            "cpu_ratio_median": statistics.median(ratios),
            "cpu_ratios": ratios,
            "sessions": sessions,
            "update_hold_s": hold_s,
        }

    result: dict[str, Any] = _with_gateways(measure, sessions, hold_s)
    return result


def profile_gateway(variant: str, seconds: float, sessions: int = 64, perf: bool = False) -> dict[str, Any]:
    """py-spy (200 Hz, --native), or Linux perf with `perf`, on one worker of the `variant`
    ("off" or "on") gateway under wrk c64."""

    def record(stack: spine.Stack, start: Callable[[bool], None], script: Path) -> dict[str, Any]:
        start(variant == "on")
        assert stack.gateway is not None
        log = stack.tmp / f"gateway-sessions-{variant == 'on'}.log"
        server = spine.Server(f"sessions-{variant}", stack.gateway, stack.gateway_port, log, {})
        options = argparse.Namespace(
            warmup=spine.WARMUP_S, profile_seconds=seconds, profile_rate=200, native=True, perf=perf
        )
        result: dict[str, Any] = profile(stack, server, options, stack.tmp, script)
        return result

    found: dict[str, Any] = _with_gateways(record, sessions)
    return found


def gateway_lines(g: dict[str, Any], target_loss: float) -> list[str]:
    rps, cpu, store = g["rps"], g["cpu_ms_per_request"], g["redis_cpu_ms_per_request"]
    # Runs from before the commands' time was measured have none
    commands = g.get("redis_command_ms_per_request", {"off": float("nan"), "on": float("nan")})
    loss = 1 - rps["on"] / rps["off"]
    paired = g["cpu_ratio_median"]
    both_on, both_off = cpu["on"] + store["on"], cpu["off"] + store["off"]
    rounds = ", ".join(f"{r:.3f}" for r in g["cpu_ratios"])
    return [
        "",
        f"The whole pipeline (2 workers, Redis metering with a budget, the shipped policy, redaction "
        f"both ways, the decision log, metrics; upstream {g['upstream']}), wrk c64, every request "
        f"naming one of {g.get('sessions', 64):,} sessions"
        + (f" (sessions.update_hold_s {g['update_hold_s']:g})" if g.get("update_hold_s") else "")
        + "; both gateways up side by side, "
        f"{len(g['cpu_ratios'])} rounds of {g.get('seconds', 10):.0f} s against each, back to back, "
        "the order alternating:",
        "",
        "| sessions | RPS at c64 | gateway CPU per request | Redis CPU per request "
        "| Redis time in commands |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {rps[name]:,.0f} | {cpu[name]:.3f} ms | {store[name]:.3f} ms "
            f"| {commands[name]:.4f} ms |"
            for name in ("off", "on")
        ),
        "",
        f"Throughput lost to sessions: {100 * loss:.1f} % (rounds: off {_listed(g['runs']['off'])}, "
        f"on {_listed(g['runs']['on'])} RPS; the load generator and Redis share the 2 cores, so RPS "
        "follows the machine's load more than the gateway's cost). Gateway CPU per request, on / off: "
        f"{cpu['on'] / cpu['off']:.3f} (medians), per round {rounds}, median of the rounds' ratios "
        f"{paired:.3f}. Taking that paired ratio as the measure (a CPU-bound gateway's throughput is "
        f"the inverse of its CPU per request), sessions cost {100 * (1 - 1 / paired):.1f} % of the "
        f"whole pipeline's throughput (target <= {100 * target_loss:.0f} %: "
        f"{spine.met(1 - 1 / paired <= target_loss)}). Counting Redis's CPU too (it keeps the "
        f"records), gateway + Redis per request on / off: {both_on / both_off:.3f}.",
    ]


def _listed(values: list[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)
