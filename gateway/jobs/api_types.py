"""What the HTTP edge and the jobs API exchange: a request in, an answer out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ApiRequest:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    request_id: str
    read_body: Callable[[int], Awaitable[bytes]]  # the body, decoded, refused past the limit given


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
