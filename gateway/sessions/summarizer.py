"""The summaries of compact checkpoints: each one a request of its own, made by the gateway
for the session's principal, through the gateway's own pipeline (policy, redaction,
metering to the same tenant and key, routing, response guards, the decision log, metrics
and a span in the session request's trace), never a side channel to an upstream.

Its pipeline is the request pipeline without the session stages (a summary request is no
turn of the session, and compacts nothing) and with `InternalAdmit` for `Admit`: the caller
is the principal the session request authenticated as. Whatever goes wrong (a refusal, an
upstream failure, the time allowed running out) is the caller's to log and count; the
session request goes on uncompacted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.errors import GatewayError, UpstreamTimeout
from gateway.exchange import Endpoint, Exchange
from gateway.pipeline import Pipeline
from gateway.request_ids import request_id_from
from gateway.tracing import NO_TRACER, Tracer
from gateway.validation import parse_json_object, validate


class SummaryFailed(Exception):
    """No summary: why, in a low-cardinality word (`reason`), and what happened."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class InternalAdmit:
    """admit for a request the gateway makes itself: the principal is already set."""

    name = "admit"

    async def __call__(self, exchange: Exchange) -> None:
        body = parse_json_object(exchange.raw_body)
        validate(exchange.endpoint, body)
        exchange.body = body
        exchange.model_alias = body["model"]


class Summarizer:
    def __init__(self, upstream_ids: Callable[[str], str]) -> None:
        self._upstream_ids = upstream_ids
        self._pipeline: Pipeline | None = None
        self._tracer: Tracer = NO_TRACER

    def bind(self, pipeline: Pipeline) -> None:
        """The summary pipeline of the config now serving (set again when it is edited)."""
        self._pipeline = pipeline

    def trace_with(self, tracer: Tracer) -> None:
        self._tracer = tracer

    async def summarize(
        self, parent: Exchange, alias: str, messages: list[Any], max_tokens: int, timeout_s: float
    ) -> str:
        """The summary's text; raises SummaryFailed."""
        if self._pipeline is None:
            raise SummaryFailed("unavailable", "no summary pipeline is configured")
        body = {"model": alias, "messages": messages, "max_tokens": max_tokens, "stream": False}
        now = time.monotonic()
        request_id = request_id_from(None)
        headers: dict[str, str] = {}
        trace = parent.trace
        if trace.sampled and trace.trace_id and trace.span_id:
            headers["traceparent"] = f"00-{trace.trace_id}-{trace.span_id}-01"
        exchange = Exchange(
            request_id=request_id,
            endpoint=Endpoint.CHAT,
            received_at=now,
            deadline=now + timeout_s,
            headers=headers,
            raw_body=orjson.dumps(body),
            principal=parent.principal,
            # Spent on the session's behalf: its workflow and priority, for the ledger and the policy.
            workflow=parent.workflow,
            priority=parent.priority,
            session_key=parent.session_key,  # the session's replica: its prefix cache holds these messages
            upstream_request_id=self._upstream_ids(request_id),
        )
        try:
            async with asyncio.timeout(timeout_s):
                return await self._run(self._pipeline, exchange)
        except TimeoutError:
            raise SummaryFailed("timeout", f"no summary within {timeout_s:g} s") from None
        finally:
            # The summary's decision (whatever came of it) is one taken in the session.
            if exchange.decision_id and parent.session is not None:
                parent.session.summary_decisions += (str(exchange.decision_id),)

    async def _run(self, pipeline: Pipeline, exchange: Exchange) -> str:
        exchange.trace = self._tracer.begin(exchange)
        failure: BaseException | None = None
        try:
            response = await self._respond(pipeline, exchange)
        except BaseException as exc:
            failure = exc
        # Not a `finally`: compiled, an await there can lose the exception passing through it
        # (docs/architecture.md, Compiled request path).
        await pipeline.finish(exchange)
        exchange.trace.end(exchange)
        if failure is not None:
            raise failure
        return _text(response)

    async def _respond(self, pipeline: Pipeline, exchange: Exchange) -> dict[str, Any]:
        try:
            await pipeline.prepare(exchange)
            response = await pipeline.respond(exchange)
            exchange.status = 200
            exchange.first_byte_at = time.monotonic()
            exchange.response_body = orjson.dumps(response)
        except GatewayError as exc:
            exchange.status, exchange.error_code = exc.status, exc.code
            reason = (
                "timeout" if isinstance(exc, UpstreamTimeout) else "refused" if exc.status < 500 else "failed"
            )
            raise SummaryFailed(reason, exc.message) from None
        except asyncio.CancelledError:
            exchange.error_code = "timeout"
            raise
        except Exception as failure:
            exchange.status, exchange.error_code = 500, "internal_error"
            raise SummaryFailed("failed", type(failure).__name__) from failure
        return response


def _text(response: dict[str, Any]) -> str:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = first.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.strip():
        raise SummaryFailed("empty", "the summarizer answered without text")
    return content.strip()
