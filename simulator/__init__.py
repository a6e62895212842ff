"""Tollgate's upstream simulator: a real HTTP stand-in for an OpenAI-compatible model server
and for Cloudflare Workers AI, with a prefix cache, a timing model and injectable faults."""

from simulator.cli import main
from simulator.config import SimConfig
from simulator.faults import Fault, FaultPlan
from simulator.recording import RecordedRequest
from simulator.server import Simulator
from simulator.threaded import RunningSimulator

__all__ = ["Fault", "FaultPlan", "RecordedRequest", "RunningSimulator", "SimConfig", "Simulator", "main"]
