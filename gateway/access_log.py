"""One structured line per finished request: what happened, never what was said.

The record carries ids, tenant, model, upstream, status, timings and token counts; no
message text, no key, no header value other than the request id, and the id the upstream was
sent for it (derived from it): the link between the client's logs and the upstream's.
"""

from __future__ import annotations

import logging
import time

from gateway.exchange import Exchange
from gateway.logs import log_info
from gateway.redaction.marks import Verbatim

logger = logging.getLogger("tollgate.access")


class AccessLog:
    name = "access_log"

    async def finish(self, exchange: Exchange) -> None:
        if not logger.isEnabledFor(logging.INFO):
            return
        completed = exchange.completed_at or time.monotonic()
        last = exchange.attempts[-1] if exchange.attempts else None
        principal = exchange.principal
        usage = exchange.usage
        log_info(
            logger,
            "request",
            {
                "request_id": exchange.request_id,
                "upstream_request_id": exchange.upstream_request_id if exchange.attempts else None,
                "tenant": principal.tenant.name if principal else None,
                "key_id": principal.key_id if principal else None,
                "endpoint": exchange.endpoint.value,
                "api": exchange.api,
                "model": exchange.model_alias or None,
                "routed_alias": exchange.routed_alias,  # the alias a policy moved the request to
                "workflow": exchange.workflow,
                "priority": exchange.priority,
                "upstream": last.upstream if last else None,
                "upstream_model": last.model if last else None,
                "replica": last.replica if last else None,  # index in the upstream's `replicas`
                "attempts": len(exchange.attempts),
                "stream": exchange.stream,
                "status": exchange.status,
                "error": exchange.error_code,
                "duration_ms": round((completed - exchange.received_at) * 1000, 2),
                "ttfb_ms": round((exchange.first_byte_at - exchange.received_at) * 1000, 2)
                if exchange.first_byte_at
                else None,
                "prompt_tokens": usage.prompt_tokens,
                "cached_tokens": usage.cached_tokens,
                "completion_tokens": usage.completion_tokens,
                "usage_source": usage.source,
                # the gateway's own hex hash: logged as it is (a scan could take its digits for a card)
                "session_key": Verbatim(exchange.session.key) if exchange.session else None,
            },
        )
