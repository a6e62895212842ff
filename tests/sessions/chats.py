"""What the simulator received that the sessions tests count: chat completions only (a
gateway's health probes reach the shared simulator too)."""

from __future__ import annotations

from simulator import RecordedRequest, RunningSimulator


def chats(sim: RunningSimulator) -> list[RecordedRequest]:
    return [r for r in list(sim.requests) if r.path.endswith("/chat/completions")]
