"""Mutable state shared by every replica of one running simulator."""

from __future__ import annotations

import asyncio
import itertools
import random
import zlib
from dataclasses import dataclass, field

from simulator.async_queue import AsyncQueue
from simulator.capacity import CapacitySchedule
from simulator.chat import ReplyMaker
from simulator.config import SimConfig
from simulator.faults import FaultPlan
from simulator.prefix_cache import PrefixCache
from simulator.recording import RecordedRequest, ReplicaStats


@dataclass(slots=True)
class CacheSlot:
    """One model instance: its prefix cache and its counters."""

    cache: PrefixCache
    stats: ReplicaStats = field(default_factory=ReplicaStats)


class SimState:
    """Config, recordings, faults and caches; replicas are indexed like ``Simulator.urls``."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.requests: list[RecordedRequest] = []
        self.faults = FaultPlan()
        self.replicas = [CacheSlot(PrefixCache(config.cache_blocks)) for _ in range(config.replicas)]
        # The Workers AI endpoint is one service with several instances behind it, shared by
        # every replica server (they all stand for the same Cloudflare account).
        self.workers_ai = [
            CacheSlot(PrefixCache(config.cache_blocks)) for _ in range(config.workers_ai_replicas)
        ]
        self.down = [False] * config.replicas
        # Connections (aiohttp protocols) with a request in progress, per replica: taking a
        # replica down lets these finish their answer and closes the idle ones at once.
        self.busy: list[set[object]] = [set() for _ in range(config.replicas)]
        self.replies = ReplyMaker(config.default_reply_tokens)
        self.profiles = [config.replica_profile(i) for i in range(config.replicas)]
        # Serial profiles: one request at a time, and the prefill blocks the replica's other routes.
        self.serial = [asyncio.Lock() for _ in range(config.replicas)]
        self.prefill_gates = [asyncio.Lock() for _ in range(config.replicas)]
        self.capacity = CapacitySchedule(config.capacity, config.capacity_repeat_s)
        self.queue = AsyncQueue(config.queue_polls, config.running_polls)
        self.rng = random.Random()
        self.stopping = asyncio.Event()
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def workers_ai_index(self, affinity: str | None) -> int:
        """Stable instance for an ``x-session-affinity`` value; random without one."""
        count = len(self.workers_ai)
        if affinity is None:
            return self.rng.randrange(count)
        return zlib.crc32(affinity.encode()) % count
