"""``/_sim/*``: controlling a simulator that runs in another process (``tollgate sim``).

- ``POST /_sim/faults`` ``{"fault": {...}, "count"?: n, "replica"?: i, "every"?: n,
  "first_attempts"?: bool}``: ``FaultPlan.set``.
- ``DELETE /_sim/faults``: ``FaultPlan.clear`` (also brings down replicas back up).
- ``POST /_sim/replicas/{i}/down`` and ``.../up``: ``FaultPlan.down`` / ``up``.
- ``GET /_sim/stats``: per-replica and per-Workers-AI-instance counters, request count.
- ``GET /_sim/requests`` / ``DELETE /_sim/requests``: the recorded requests / forget them.
- ``POST /_sim/capacity`` ``{"windows": [{"start_s", "end_s", "code"?}], "repeat_s"?}``: replace
  the capacity schedule (its clock starts now); ``DELETE /_sim/capacity``: full capacity again.

These paths need no API key and are not recorded.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson
from aiohttp import web

from simulator.capacity import parse_windows
from simulator.state import SimState


def _json(document: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(document), content_type="application/json")


def _optional_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"'{name}' must be an integer")
    return value


def stats_document(state: SimState) -> dict[str, Any]:
    return {
        "replicas": [slot.stats.as_dict() for slot in state.replicas],
        "workers_ai": [slot.stats.as_dict() for slot in state.workers_ai],
        "requests": len(state.requests),
        "down": [i for i, down in enumerate(state.down) if down],
        "profiles": [profile.name for profile in state.profiles],
        "capacity": state.capacity.as_dict(),
    }


def control_routes(state: SimState, serving_replica: int) -> list[web.RouteDef]:
    """The ``/_sim`` routes for replica ``serving_replica`` of ``state``."""

    async def set_fault(request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            fault = body.get("fault")
            if not isinstance(fault, dict):
                raise ValueError("'fault' must be an object")
            state.faults.set(
                fault,
                _optional_int(body, "count"),
                _optional_int(body, "replica"),
                every=_optional_int(body, "every") or 1,
                first_attempts=body.get("first_attempts") is True,
            )
        except ValueError as exc:  # includes orjson.JSONDecodeError
            return _json({"error": str(exc)}, 400)
        return _json({"ok": True})

    async def clear_faults(request: web.Request) -> web.Response:
        state.faults.clear()
        return _json({"ok": True})

    async def switch_replica(request: web.Request) -> web.Response:
        replica = int(request.match_info["replica"])
        if not 0 <= replica < len(state.replicas):
            return _json({"error": "no such replica"}, 404)
        busy = state.busy[serving_replica]
        busy.add(request.protocol)  # so taking this very replica down still answers this request
        try:
            if request.match_info["action"] == "down":
                state.faults.down(replica)
            else:
                state.faults.up(replica)
        finally:
            busy.discard(request.protocol)
        return _json({"ok": True})

    async def stats(request: web.Request) -> web.Response:
        return _json(stats_document(state))

    async def requests(request: web.Request) -> web.Response:
        return _json([asdict(rec) for rec in state.requests])

    async def clear_requests(request: web.Request) -> web.Response:
        state.requests.clear()
        return _json({"ok": True})

    async def set_capacity(request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            repeat_s = body.get("repeat_s")
            if repeat_s is not None and (isinstance(repeat_s, bool) or not isinstance(repeat_s, int | float)):
                raise ValueError("'repeat_s' must be a number")
            state.capacity.set(parse_windows(body.get("windows")), repeat_s)
        except ValueError as exc:
            return _json({"error": str(exc)}, 400)
        return _json({"ok": True})

    async def clear_capacity(request: web.Request) -> web.Response:
        state.capacity.clear()
        return _json({"ok": True})

    return [
        web.post("/_sim/capacity", set_capacity),
        web.delete("/_sim/capacity", clear_capacity),
        web.post("/_sim/faults", set_fault),
        web.delete("/_sim/faults", clear_faults),
        web.post(r"/_sim/replicas/{replica:\d+}/{action:down|up}", switch_replica),
        web.get("/_sim/stats", stats),
        web.get("/_sim/requests", requests),
        web.delete("/_sim/requests", clear_requests),
    ]
