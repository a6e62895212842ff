"""The doors a gateway opens, one line each, and which door's envelope an error takes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from gateway.doors.base import Door
from gateway.doors.messages import MessagesDoor
from gateway.doors.openai import OpenAIDoor
from gateway.doors.response_store import ResponseRecords
from gateway.doors.responses import ResponsesDoor
from gateway.exchange import Endpoint

_ANTHROPIC_HEADER = "anthropic-version"
_ASYNC = "/v1/async/"  # gateway/jobs/api.py's ASYNC_PATH: a job polled there answers in its door's format
D = TypeVar("D")


class Doors:
    def __init__(self, doors: Iterable[Door]) -> None:
        self.by_path: dict[str, Door] = {}
        for door in doors:
            if door.path in self.by_path:
                raise ValueError(f"two doors answer {door.path}")
            self.by_path[door.path] = door
        self._prefixes = sorted(self.by_path, key=len, reverse=True)
        self._by_api = {door.api: door for door in self.by_path.values()}
        self._by_job = {door.job_prefix + "_": door for door in self.by_path.values()}

    def by_api(self, api: str) -> Door | None:
        return self._by_api.get(api)

    def for_job(self, job_id: str) -> Door | None:
        """The door an async job came through, by its id's prefix."""
        prefix, sep, _ = job_id.partition("_")
        return self._by_job.get(prefix + sep)

    def find(self, kind: type[D]) -> D:
        """The door of this class (the composition root wires some doors' other routes)."""
        for door in self.by_path.values():
            if isinstance(door, kind):
                return door
        raise LookupError(f"no {kind.__name__} is open")

    def for_errors(self, path: str, headers: Mapping[str, str]) -> Door | None:
        """The door whose API a path belongs to (`/v1/messages/count_tokens` is the Messages
        API's); a path shared by the APIs (`/v1/models/...`) is Anthropic's when the client
        sends `anthropic-version`. None: OpenAI's envelope."""
        for prefix in self._prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                return self.by_path[prefix]
        if path.startswith(_ASYNC):
            return self.for_job(path[len(_ASYNC) :])
        if _ANTHROPIC_HEADER in headers:
            return next((d for d in self.by_path.values() if isinstance(d, MessagesDoor)), None)
        return None


def openai_doors() -> list[Door]:
    return [
        OpenAIDoor("/v1/chat/completions", Endpoint.CHAT),
        OpenAIDoor("/v1/embeddings", Endpoint.EMBEDDINGS),
    ]


def build_doors(records: ResponseRecords | None, scrub: Callable[[Any], Any] | None = None) -> Doors:
    """The doors; `scrub` redacts what a Responses job keeps that the body's redaction does not."""
    return Doors(
        [
            *openai_doors(),
            ResponsesDoor(records, scrub),
            MessagesDoor(),
        ]
    )
