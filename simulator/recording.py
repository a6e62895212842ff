"""What the simulator remembers about the traffic it received."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class RecordedRequest:
    """One request as received, recorded before it is answered (``/_sim/*`` is not recorded)."""

    replica: int  # index of the replica server (port) that received it
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, or None when there was no body or it was not JSON
    query: dict[str, str] = field(default_factory=dict)
    workers_ai_replica: int | None = None  # internal Workers AI replica that served it
    status: int | None = None  # status sent, None if no response was sent
    client_disconnected: bool = False  # the client went away before the answer was complete


@dataclass(slots=True)
class ReplicaStats:
    """Counters for one cache (a replica server, or an internal Workers AI replica)."""

    # Inference requests (chat completions, embeddings, /ai/run): received by a replica server,
    # faulted or not; served, for an internal Workers AI instance.
    requests: int = 0
    prompt_tokens: int = 0  # of the requests that got as far as being served
    cached_tokens: int = 0

    def add(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
