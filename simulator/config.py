"""Configuration of the upstream simulator."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.capacity import CapacityWindow
from simulator.profiles import DEFAULT_PROFILE, Profile, profile_named

DEFAULT_MODELS: tuple[str, ...] = (
    "sim-model",
    "@cf/moonshotai/kimi-k2.6",
    "@cf/baai/bge-large-en-v1.5",
)


@dataclass(slots=True)
class SimConfig:
    """How the simulator listens and behaves.

    Latencies of zero select zero-latency mode: no ``asyncio.sleep`` is ever called, which is
    what throughput benchmarks want.
    """

    host: str = "127.0.0.1"
    port: int = 0  # 0 = every replica picks a free port; otherwise replica i listens on port + i
    replicas: int = 1  # replica servers, each with its own port and its own prefix cache
    prefill_s_per_token: float = 0.0  # charged per *uncached* prompt token before the first token
    decode_s_per_token: float = 0.0  # charged per completion token
    block_tokens: int = 16  # prefix-cache block size in tokens
    cache_blocks: int = 4096  # LRU capacity per replica, in blocks
    api_key: str | None = None  # when set, requests need "Authorization: Bearer <api_key>"
    workers_ai_replicas: int = 4  # internal replicas behind the single Workers AI endpoint
    default_reply_tokens: int = 16
    models: tuple[str, ...] = field(default=DEFAULT_MODELS)  # listed by GET /v1/models
    # Server profile (simulator.profiles) of every replica, or one name per replica.
    profiles: tuple[str, ...] = (DEFAULT_PROFILE,)
    cache_report: bool = False  # vLLM --enable-prompt-tokens-details / SGLang --enable-cache-report
    capacity: tuple[CapacityWindow, ...] = ()  # 429 windows, in seconds from the start
    capacity_repeat_s: float | None = None  # the capacity schedule starts over this often
    queue_polls: int = 1  # polls an async batch answers "queued" (while there is capacity)
    running_polls: int = 1  # then polls it answers "running", then its result

    def replica_profile(self, replica: int) -> Profile:
        return profile_named(self.profiles[replica if len(self.profiles) > 1 else 0])

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.workers_ai_replicas < 1:
            raise ValueError("replicas and workers_ai_replicas must be at least 1")
        if self.block_tokens < 1 or self.cache_blocks < 0 or self.default_reply_tokens < 0:
            raise ValueError("block_tokens must be >= 1; cache_blocks and default_reply_tokens >= 0")
        if self.prefill_s_per_token < 0 or self.decode_s_per_token < 0:
            raise ValueError("latencies must not be negative")
        if len(self.profiles) not in (1, self.replicas):
            raise ValueError("give one profile, or one per replica")
        for name in self.profiles:
            profile_named(name)  # raises ValueError for an unknown name
        if self.queue_polls < 0 or self.running_polls < 0:
            raise ValueError("queue_polls and running_polls must not be negative")
        if self.capacity_repeat_s is not None and self.capacity_repeat_s <= 0:
            raise ValueError("capacity_repeat_s must be positive")
