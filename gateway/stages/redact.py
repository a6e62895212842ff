"""redact: the request's sensitive data masked, tokenised or refused before anything is sent.

The policy decision chooses the modes and kinds when there is one (`Decision.redact`);
otherwise the tenant's config does. With both directions off the stage does nothing and
the response guard sees no state, so redaction costs nothing. A detection failure
refuses the request (RedactionFailed, 500, with the request id) unless the tenant is
configured fail-open; either way it is logged, by type only, and counted.
"""

from __future__ import annotations

import logging

from gateway.errors import RedactionFailed, SensitiveDataBlocked
from gateway.exchange import Exchange
from gateway.redaction.request import redact_request
from gateway.redaction.settings import RedactionSettings
from gateway.redaction.state import RedactionCounters, RedactionState

logger = logging.getLogger("tollgate.redaction")


class Redact:
    name = "redact"

    def __init__(self, settings: RedactionSettings, counters: RedactionCounters) -> None:
        self._settings = settings
        self._counters = counters

    async def __call__(self, exchange: Exchange) -> None:
        tenant = exchange.tenant
        if tenant is None:
            return
        settings = self._settings.for_tenant(tenant.name)
        rules = exchange.decision.redact if exchange.decision is not None else settings.rules
        if rules.request == "off" and rules.response == "off":
            return
        state = RedactionState(rules, settings.detector(rules.entities), settings.fail_open)
        exchange.redaction = state
        if rules.request == "off":
            return
        self._counters.requests += 1
        try:
            redact_request(exchange.endpoint, exchange.body, state, settings.scan_tool_descriptions)
        except SensitiveDataBlocked:
            self._counters.blocked += 1
            raise
        except Exception as exc:
            self._counters.failures += 1
            # The exception's text may quote the content: its type only.
            logger.error(
                "request redaction failed",
                extra={
                    "request_id": exchange.request_id,
                    "tenant": tenant.name,
                    "error": type(exc).__name__,
                    "fail_open": settings.fail_open,
                },
            )
            if not settings.fail_open:
                raise RedactionFailed(exchange.request_id) from None
            self._counters.failed_open += 1
        finally:
            if state.found:  # most requests hold none: no update of the running totals to make
                self._counters.entities.update(state.found)
