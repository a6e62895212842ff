"""Tollgate's upstream simulator: a real HTTP stand-in for an OpenAI-compatible model server
and for Cloudflare Workers AI, with a prefix cache, a timing model and injectable faults."""

from simulator.capacity import CapacitySchedule, CapacityWindow
from simulator.cli import main
from simulator.config import SimConfig
from simulator.faults import Fault, FaultPlan
from simulator.profiles import PROFILES, Profile
from simulator.recording import RecordedRequest
from simulator.server import Simulator
from simulator.threaded import RunningSimulator

__all__ = [
    "PROFILES",
    "CapacitySchedule",
    "CapacityWindow",
    "Fault",
    "FaultPlan",
    "Profile",
    "RecordedRequest",
    "RunningSimulator",
    "SimConfig",
    "Simulator",
    "main",
]
