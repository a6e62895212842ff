"""The tracing port (gateway/tracing.py): spans recorded as plain values during the request,
encoded (`otlp_wire`) and handed to the span queue when it ends.

Head sampling, decided once per request in `begin`: a client's traceparent decides for its own
request (parent-based), any other request is sampled with `traces.sampling_ratio`. A request
that is not sampled gets an `UnsampledTrace`: two random ids and a format string; it still
passes a traceparent (flag 00) upstream and its ids to the logs. A sampled request's spans:

    POST /v1/chat/completions   SERVER    the request, from receipt to the last finisher
      admit, decide, ...        INTERNAL  one per stage (`traces.stage_spans`)
      chat {upstream model}     CLIENT    one per upstream attempt, GenAI attributes

Why not the SDK's Tracer: see `otlp_wire`. Times come from the Exchange's monotonic clock
readings, converted once per request, so an attempt's span ends exactly where the forwarder
says it did.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from urllib.parse import urlsplit

from gateway.errors import GatewayError
from gateway.exchange import Attempt, Exchange
from gateway.ports import Upstream
from gateway.redaction.marks import Verbatim
from gateway.tracing import RequestTrace
from telemetry import names as n
from telemetry import otlp_wire, traceparent
from telemetry.labels import WorkflowLabels
from telemetry.span_attributes import (
    attempt_attributes,
    failed_attributes,
    served_attributes,
    server_end_attributes,
    usage_attributes,
)
from telemetry.span_queue import FinishedSpans, SpanQueue

logger = logging.getLogger("tollgate.telemetry")

_ROUTES = {
    "chat.completions": "/v1/chat/completions",
    "embeddings": "/v1/embeddings",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}


class SpanRecorder:
    """The `Tracer` port: decides sampling and builds each sampled request's spans."""

    def __init__(
        self,
        queue: SpanQueue,
        *,
        sampling_ratio: float,
        stage_spans: bool,
        workflows: WorkflowLabels,
        scrub: Callable[[str], str],
    ) -> None:
        self._queue = queue
        self._ratio = sampling_ratio
        self.stage_spans = stage_spans
        self.workflows = workflows
        # For attribute values a client or an upstream chose (model alias, response model,
        # finish reasons): the same few values recur, and scrubbing one costs about 10 µs.
        self.scrub = _Remembered(scrub)
        # For the request id, new on every request: a client may have chosen it, so it is
        # scrubbed too (as in the log lines, with the same scrubber), but not remembered.
        self.scrub_unique = scrub
        self._servers: dict[str, tuple[str, int]] = {}  # replica URL -> (host, port)

    def begin(self, exchange: Exchange) -> RequestTrace:
        headers = exchange.headers
        parent = traceparent.parse(headers.get("traceparent"), headers.get("tracestate"))
        if parent is not None and not self._followable(parent):
            parent = None
        sampled = parent.sampled if parent is not None else random.random() < self._ratio
        trace_id = parent.trace_id if parent is not None else random.getrandbits(128)
        if not sampled:
            return UnsampledTrace(trace_id, random.getrandbits(64), parent.tracestate if parent else None)
        return SampledTrace(self, exchange, trace_id, parent)

    def _followable(self, parent: traceparent.Parent) -> bool:
        """Whether a client's trace id may be written as it is: the trace id is written unscrubbed
        (`Verbatim`) everywhere, which is safe for random hex but not for hex a client chose to
        hold a card number. One the scrubber would change starts a new trace instead (what Trace
        Context asks of a parent that cannot be used); a random id is hit about once in 7,000."""
        trace_hex = f"{parent.trace_id:032x}"
        return self.scrub_unique(trace_hex) == trace_hex

    def emit(self, spans: FinishedSpans, count: int) -> None:
        self._queue.put(spans, count)

    def server_of(self, upstream: Upstream, replica: int) -> tuple[str, int]:
        url = upstream.replicas[replica] if replica < len(upstream.replicas) else upstream.replicas[0]
        found = self._servers.get(url)
        if found is None:
            parts = urlsplit(url)
            default = 443 if parts.scheme == "https" else 80
            found = self._servers[url] = (parts.hostname or "", parts.port or default)
        return found


class _Remembered:
    """A scrubber that remembers its answers for short values (a bounded table)."""

    __slots__ = ("_answers", "_scrub")

    MAX_VALUES = 1024
    MAX_CHARS = 256

    def __init__(self, scrub: Callable[[str], str]) -> None:
        self._scrub = scrub
        self._answers: dict[str, str] = {}

    def __call__(self, value: str) -> str:
        found = self._answers.get(value)
        if found is None:
            found = self._scrub(value)
            if len(value) <= self.MAX_CHARS:
                if len(self._answers) >= self.MAX_VALUES:
                    self._answers.clear()
                self._answers[value] = found
        return found


# Trace and span ids are rendered as `Verbatim` hex: the scrubber passes them as they are. A
# scan could take a run of their digits for a card number and mask it in the log lines and
# the decision log, which would then name a trace that does not exist. An id from a client's
# traceparent is followed only if the scrubber finds nothing in it (`_followable`).


class UnsampledTrace:
    __slots__ = ("_headers", "_span", "_trace", "_trace_hex", "_tracestate")

    sampled = False

    def __init__(self, trace_id: int, span_id: int, tracestate: str | None) -> None:
        self._trace = trace_id
        self._span = span_id
        self._tracestate = tracestate
        self._headers: dict[str, str] | None = None
        self._trace_hex: str | None = None

    @property
    def trace_id(self) -> str:
        found = self._trace_hex  # read by every log line and the audit record
        if found is None:
            found = self._trace_hex = Verbatim(f"{self._trace:032x}")
        return found

    @property
    def span_id(self) -> str:
        return Verbatim(f"{self._span:016x}")

    def stage(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _NO_SPAN

    def upstream_headers(self, attempt: Attempt, upstream: Upstream) -> Mapping[str, str]:
        if self._headers is None:
            self._headers = traceparent.headers_hex(self.trace_id, self._span, False, self._tracestate)
        return self._headers

    def end(self, exchange: Exchange) -> None:
        return None


# A stage as it ran: name, start and end (time.monotonic()), error type if it raised.
_Stage = tuple[str, float, float, str | None]


class SampledTrace:
    __slots__ = (
        "_attempts",
        "_ended",
        "_exchange",
        "_offset_ns",
        "_parent",
        "_recorder",
        "_span",
        "_stages",
        "_trace",
        "_trace_hex",
        "_tracestate",
    )

    sampled = True

    def __init__(
        self, recorder: SpanRecorder, exchange: Exchange, trace_id: int, parent: traceparent.Parent | None
    ) -> None:
        self._recorder = recorder
        self._exchange: Exchange | None = exchange  # until it ends
        self._trace = trace_id
        self._span = random.getrandbits(64)
        self._parent = parent
        self._tracestate = parent.tracestate if parent is not None else None
        # time.monotonic() readings -> Unix nanoseconds, for this request
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self._stages: list[_Stage] = []
        self._attempts: list[tuple[Attempt, int, bytes]] = []  # attributes encoded
        self._trace_hex: str | None = None
        self._ended: Ended | None = None

    @property
    def trace_id(self) -> str:
        found = self._trace_hex  # read by every log line, the exemplars, the audit record
        if found is None:
            found = self._trace_hex = Verbatim(f"{self._trace:032x}")
        return found

    @property
    def span_id(self) -> str:
        return Verbatim(f"{self._span:016x}")

    def stage(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _StageTimer(self._stages, name) if self._recorder.stage_spans else _NO_SPAN

    def upstream_headers(self, attempt: Attempt, upstream: Upstream) -> Mapping[str, str]:
        span_id = random.getrandbits(64)
        exchange = self._exchange
        if exchange is not None:  # else the request has ended: nothing more is recorded
            host, port = self._recorder.server_of(upstream, attempt.replica)
            index = len(self._attempts)
            attributes = attempt_attributes(exchange, attempt, upstream.provider, host, port, index)
            self._attempts.append((attempt, span_id, attributes))
        return traceparent.headers_hex(self.trace_id, span_id, True, self._tracestate)

    def end(self, exchange: Exchange) -> None:
        """What the spans will say, copied off the exchange (which is then let go); they are
        encoded in the export thread (`encode`)."""
        if self._ended is not None:
            return
        try:
            recorder = self._recorder
            workflow = recorder.workflows.of(exchange)
            self._ended = Ended(exchange, workflow, recorder.scrub, recorder.scrub_unique)
            self._exchange = None
            recorder.emit(self, len(self._stages) + len(self._attempts) + 1)
        except Exception:  # a telemetry fault must not become the request's
            logger.exception("spans not recorded", extra={"request_id": exchange.request_id})

    def encode(self) -> bytes:
        ended = self._ended
        if ended is None:
            raise RuntimeError("the request has not ended")
        return self._encode(ended)

    def _encode(self, exchange: Ended) -> bytes:
        completed = exchange.completed_at
        offset = self._offset_ns
        # Every span of the request carries its id: encoded once, shared by all of them.
        request_id = otlp_wire.fresh_attribute(n.REQUEST_ID, exchange.request_id)
        head = otlp_wire.SpanHead(self._trace, self._span, request_id)
        error_type = functools.partial(otlp_wire.attribute, n.ERROR_TYPE)
        spans = head.internal(self._stages, offset, random.getrandbits, error_type)
        usage = usage_attributes(exchange.usage)  # the attempt that served and the request: the same
        for attempt, span_id, started in self._attempts:
            error = None
            if attempt.ended_at is not None and attempt.error is None:
                attributes = started + served_attributes(exchange, attempt, usage)
                ended = completed if exchange.stream else attempt.ended_at
            else:
                error = attempt.error or "cancelled"
                attributes = started + failed_attributes(attempt, error)
                ended = attempt.ended_at if attempt.ended_at is not None else completed
            spans.append(
                head.child(
                    span_id,
                    f"{exchange.endpoint.operation} {attempt.model}",
                    otlp_wire.CLIENT,
                    int(attempt.started_at * 1e9) + offset,
                    int(ended * 1e9) + offset,
                    attributes,
                    error,
                )
            )
        route = _ROUTES.get(exchange.api, "")
        server = server_end_attributes(exchange, route, usage)
        first_byte = exchange.first_byte_at
        spans.append(
            head.parent(
                f"POST {route}",
                otlp_wire.SERVER,
                int(exchange.received_at * 1e9) + offset,
                int(completed * 1e9) + offset,
                server,
                remote_parent_id=self._parent.span_id if self._parent is not None else None,
                # A client's error is not the server's (HTTP conventions): only 5xx fail it.
                error=exchange.error_code or str(exchange.status) if exchange.status >= 500 else None,
                events=() if first_byte is None else ((n.FIRST_TOKEN_EVENT, int(first_byte * 1e9) + offset),),
            )
        )
        return b"".join(spans)


class Ended:
    """What a finished request's spans say, copied off its Exchange when it ends (the few
    values a client or an upstream chose already scrubbed), so that the spans can be encoded
    later, in another thread, without keeping the request's bodies alive."""

    __slots__ = (
        "api",
        "attempts",
        "completed_at",
        "decision",
        "decision_id",
        "endpoint",
        "error_code",
        "finish_reasons",
        "first_byte_at",
        "model_alias",
        "policy_revision",
        "principal",
        "received_at",
        "request_id",
        "response_model",
        "session_key",
        "status",
        "stream",
        "tool_calls_blocked",
        "usage",
        "workflow",
    )

    def __init__(
        self,
        exchange: Exchange,
        workflow: str,
        scrub: Callable[[str], str],
        scrub_unique: Callable[[str], str],
    ) -> None:
        self.request_id = scrub_unique(exchange.request_id)  # a client's X-Request-ID, maybe
        self.endpoint = exchange.endpoint
        self.api = exchange.api
        self.stream = exchange.stream
        self.status = exchange.status
        self.error_code = exchange.error_code
        self.received_at = exchange.received_at
        completed = exchange.completed_at
        self.completed_at = completed if completed is not None else time.monotonic()
        self.first_byte_at = exchange.first_byte_at
        self.principal = exchange.principal
        self.decision = exchange.decision
        self.decision_id = exchange.decision_id
        self.policy_revision = exchange.policy_revision
        self.tool_calls_blocked = exchange.tool_calls_blocked
        self.attempts = tuple(exchange.attempts)
        self.usage = exchange.usage
        self.session_key = exchange.session_key
        self.workflow = workflow
        # The client's alias and the upstream's words: the only strings here not the gateway's.
        self.model_alias = scrub(exchange.model_alias) if exchange.model_alias else ""
        self.response_model = scrub(exchange.response_model) if exchange.response_model else None
        self.finish_reasons = [scrub(reason) for reason in exchange.finish_reasons]


class _NoSpan(contextlib.AbstractContextManager[None]):
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


_NO_SPAN = _NoSpan()


class _StageTimer(contextlib.AbstractContextManager[None]):
    __slots__ = ("_into", "_name", "_started")

    def __init__(self, into: list[_Stage], name: str) -> None:
        self._into = into
        self._name = name
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.monotonic()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        error = None
        if exc is not None:
            error = exc.code if isinstance(exc, GatewayError) else type(exc).__name__
        self._into.append((self._name, self._started, time.monotonic(), error))
