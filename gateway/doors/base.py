"""What a door is: a translator at the edge between one client API and the internal request.

The internal request is a chat-completions body (`Endpoint.CHAT`) or an embeddings body;
every stage and every response guard works on it alone. A door turns its API's request into
that body (after authentication, inside admit), and the guarded internal answer (a chat body,
or guarded chunks) into its API's response or stream events, and renders errors in its API's
envelope. A new door is one module implementing `Door` and one line in `registry.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.errors import GatewayError
    from gateway.exchange import Endpoint, Exchange
    from gateway.ports import Chunk


class StreamEncoder(Protocol):
    """Turns one request's guarded chunks into its door's server-sent events."""

    def chunk(self, chunk: Chunk) -> bytes:
        """The events for one guarded chunk (b"" when it yields none yet)."""
        ...

    async def done(self) -> bytes:
        """The closing events, once the upstream stream has ended and every guard is flushed
        (async: a door may store what it answered before the client sees the end)."""
        ...

    def error(self, error: GatewayError) -> bytes:
        """The door's error event for a failure after the stream has started; the stream ends after it."""
        ...


class Door(Protocol):
    api: str  # the API's name in policy input, logs, spans and metrics: "chat.completions", "messages", ...
    path: str  # the POST path it answers
    endpoint: Endpoint  # the internal request it produces
    job_prefix: str  # its async jobs' ids start with this and "_": the id of the answer they give

    def credential(self, headers: Mapping[str, str]) -> str | None:
        """The Authorization value to authenticate with (a door may accept another header)."""
        ...

    async def request(self, body: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        """The internal body for the door's (parsed JSON object) body; raises InvalidRequest,
        worded in the door's terms. Runs after authentication: `exchange.principal` is set."""
        ...

    async def response(self, exchange: Exchange, body: dict[str, Any]) -> bytes:
        """The door's response for the guarded internal response body."""
        ...

    def stream(self, exchange: Exchange) -> StreamEncoder: ...

    def error(self, error: GatewayError) -> tuple[int, bytes]:
        """The status and body the door's clients expect for an error."""
        ...

    def job_state(self, exchange: Exchange) -> dict[str, Any] | None:
        """What an async job keeps of the door's state (`exchange.door_state`), as JSON, once
        the request stages ran: nothing the redaction would not let be stored."""
        ...

    def resume(self, exchange: Exchange, state: dict[str, Any] | None) -> None:
        """The door's state again, on a job's attempt, from `job_state` and the stored body."""
        ...
