"""The completion record: what became of a request that had a policy decision.

Appended after the response (a finisher), beside the decision record written before the
upstream call; the two share `request_id` (and `decision_id` once the decide stage sets
it on the exchange). No message text, only counts and codes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gateway.errors import AuditWriteFailed
from gateway.exchange import Exchange
from gateway.ports import AuditSink

RECORD_VERSION = 1

logger = logging.getLogger("tollgate.audit")


class AuditCompletion:
    name = "audit_completion"

    def __init__(self, sink: AuditSink) -> None:
        self._sink = sink

    async def finish(self, exchange: Exchange) -> None:
        if exchange.decision is None:
            return  # refused before a decision: there is no decision record to complete
        try:
            await self._sink.append(completion_record(exchange))
        except AuditWriteFailed:
            # The response has gone out; nothing can be failed closed any more.
            logger.warning("completion record not written", extra={"request_id": exchange.request_id})


def completion_record(exchange: Exchange) -> dict[str, Any]:
    principal = exchange.principal
    usage = exchange.usage
    last = exchange.attempts[-1] if exchange.attempts else None
    completed = exchange.completed_at or time.monotonic()
    return {
        "v": RECORD_VERSION,
        "type": "completion",
        "request_id": exchange.request_id,
        "decision_id": exchange.decision_id,
        "tenant": principal.tenant.name if principal else None,
        "key_id": principal.key_id if principal else None,
        "model": exchange.model_alias or None,
        "routed_alias": exchange.routed_alias,  # the alias a policy moved the request to, if any
        "workflow": exchange.workflow,
        "priority": exchange.priority,
        "upstream": last.upstream if last else None,
        "served_model": last.model if last else None,
        "attempts": len(exchange.attempts),
        "stream": exchange.stream,
        "status": exchange.status,
        "error_code": exchange.error_code,
        "finish_reasons": list(exchange.finish_reasons),
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens,
            "reported": usage.reported,
            "source": usage.source,  # "reported" by the upstream, "counted" by the gateway, or None
        },
        "tool_calls_blocked": exchange.tool_calls_blocked,
        "duration_ms": round((completed - exchange.received_at) * 1000, 3),
    }
