"""What the spans say, read off the Exchange: GenAI semantic conventions v1.41.0 for upstream
attempts, the gateway's own ids and outcome for the server span.

Never message text, tool arguments, keys or header values: only ids the gateway made,
configured names, numbers, and the few strings a client or an upstream chooses (the model
alias a client asked for, the response model and finish reasons), which go through the
scrubber first (`SpanRecorder` remembers its answers for the values that recur).

Each function returns the attributes encoded (`otlp_wire`): the group that is the same for
every request taking the same way (operation, provider, model, upstream, tenant, key,
outcome...) is encoded once per distinct group and found again with one look-up; the values
that vary are added one by one, and those new for every request (ids, durations) are
encoded without being kept. The request id is not here: every span of the request carries it
(`request_trace`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.exchange import Attempt, Exchange, Usage
from telemetry import names as n
from telemetry.otlp_wire import attribute, fresh_attribute, group

if TYPE_CHECKING:
    from telemetry.request_trace import Ended

Attributes = dict[str, Any]

# Request parameters that are plain numbers, copied to the attempt span when the body has them.
_REQUEST_NUMBERS = (
    ("max_tokens", n.GEN_AI_REQUEST_MAX_TOKENS),
    ("max_completion_tokens", n.GEN_AI_REQUEST_MAX_TOKENS),
    ("temperature", n.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", n.GEN_AI_REQUEST_TOP_P),
)


def attempt_attributes(
    exchange: Exchange, attempt: Attempt, provider: str, host: str, port: int, index: int
) -> bytes:
    """Set when the attempt starts (the conventions want these available to samplers)."""
    if index:
        previous = exchange.attempts[index - 1] if index <= len(exchange.attempts) else None
        same = previous is not None and previous.upstream == attempt.upstream
        kind = "retry" if same else "fallback"
    else:
        kind = "first"
    operation = exchange.endpoint.operation
    stream = exchange.stream

    def route() -> Attributes:
        attributes: Attributes = {
            n.GEN_AI_OPERATION_NAME: operation,
            n.GEN_AI_PROVIDER_NAME: provider,
            n.GEN_AI_REQUEST_MODEL: attempt.model,
            n.SERVER_ADDRESS: host,
            n.SERVER_PORT: port,
            n.UPSTREAM: attempt.upstream,
            n.REPLICA: attempt.replica,
            n.ATTEMPT: index,
            n.ATTEMPT_KIND: kind,
        }
        if stream:
            attributes[n.GEN_AI_REQUEST_STREAM] = True
        return attributes

    parts = [
        group(
            (
                "attempt",
                operation,
                provider,
                attempt.model,
                host,
                port,
                attempt.upstream,
                attempt.replica,
                index,
                kind,
                stream,
            ),
            route,
        )
    ]
    if exchange.upstream_request_id:  # a UUID the gateway derived, as the upstream logs it
        parts.append(fresh_attribute(n.UPSTREAM_REQUEST_ID, exchange.upstream_request_id))
    if exchange.session_key:
        # already scoped and hashed
        parts.append(fresh_attribute(n.GEN_AI_CONVERSATION_ID, exchange.session_key))
    body = exchange.body
    for field, name in _REQUEST_NUMBERS:
        value = body.get(field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(attribute(name, value))
    choices = body.get("n")
    if isinstance(choices, int) and not isinstance(choices, bool) and choices != 1:
        parts.append(attribute(n.GEN_AI_REQUEST_CHOICE_COUNT, choices))
    return b"".join(parts)


def usage_attributes(usage: Usage) -> bytes:
    """The token counts, for the attempt that served the request and for the request (nothing
    when no upstream answered), and whether the upstream reported them or the gateway counted
    them: the counts vary, so they are not kept encoded."""
    source = usage.source
    if source is None:
        return b""
    return b"".join(
        (
            fresh_attribute(n.GEN_AI_USAGE_INPUT_TOKENS, usage.prompt_tokens),
            fresh_attribute(n.GEN_AI_USAGE_OUTPUT_TOKENS, usage.completion_tokens),
            fresh_attribute(n.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cached_tokens),
            attribute(n.USAGE_SOURCE, source),
        )
    )


def served_attributes(exchange: Ended, attempt: Attempt, usage: bytes) -> bytes:
    """The answer of the attempt that served the request; `usage` from `usage_attributes`."""
    parts: list[bytes] = []
    if attempt.status:
        parts.append(attribute(n.HTTP_RESPONSE_STATUS_CODE, attempt.status))
    if exchange.response_model:
        parts.append(attribute(n.GEN_AI_RESPONSE_MODEL, exchange.response_model))
    if exchange.finish_reasons:
        parts.append(attribute(n.GEN_AI_RESPONSE_FINISH_REASONS, exchange.finish_reasons))
    if exchange.stream and attempt.ended_at is not None:
        ttfc = attempt.ended_at - attempt.started_at
        parts.append(fresh_attribute(n.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, ttfc))
    parts.append(usage)
    if exchange.usage.reasoning_tokens:
        parts.append(fresh_attribute(n.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, exchange.usage.reasoning_tokens))
    return b"".join(parts)


def failed_attributes(attempt: Attempt, error: str) -> bytes:
    """An attempt that did not serve the request: why, and the status if it answered."""
    found = attribute(n.ERROR_TYPE, error)
    if attempt.status:
        found += attribute(n.HTTP_RESPONSE_STATUS_CODE, attempt.status)
    return found


def server_end_attributes(exchange: Ended, route: str, usage: bytes) -> bytes:
    """Who asked, for what, and what became of it; `usage` from `usage_attributes`."""
    principal = exchange.principal
    tenant, key_id = (principal.tenant.name, principal.key_id) if principal is not None else (None, None)
    decision = exchange.decision
    allow = decision.allow if decision is not None else None
    upstream = exchange.attempts[-1].upstream if exchange.attempts else None
    status, operation, alias = exchange.status, exchange.endpoint.operation, exchange.model_alias
    workflow = exchange.workflow
    error, revision = exchange.error_code, exchange.policy_revision
    key = (
        "server",
        route,
        status,
        operation,
        workflow,
        tenant,
        key_id,
        alias,
        error,
        allow,
        revision,
        upstream,
    )

    def outcome() -> Attributes:
        attributes: Attributes = {
            n.HTTP_REQUEST_METHOD: "POST",
            n.HTTP_ROUTE: route,
            n.URL_PATH: route,
            n.HTTP_RESPONSE_STATUS_CODE: status,
            n.GEN_AI_OPERATION_NAME: operation,
            n.WORKFLOW: workflow,
            n.API: exchange.api,  # one per route, which the key holds
        }
        if tenant is not None:
            attributes[n.TENANT] = tenant
            attributes[n.KEY_ID] = key_id
        if alias:
            attributes[n.MODEL_ALIAS] = alias  # the client's choice, scrubbed
        if error:
            attributes[n.ERROR_TYPE] = error
        if allow is not None:
            attributes[n.DECISION_ALLOW] = allow
        if revision:
            attributes[n.POLICY_REVISION] = revision
        if upstream is not None:
            attributes[n.UPSTREAM] = upstream
        return attributes

    parts = [
        group(
            key,
            outcome,
        )
    ]
    if exchange.session_key:
        parts.append(fresh_attribute(n.GEN_AI_CONVERSATION_ID, exchange.session_key))
    if exchange.first_byte_at is not None:
        ttft = exchange.first_byte_at - exchange.received_at
        parts.append(fresh_attribute(n.TIME_TO_FIRST_TOKEN, ttft))
    if exchange.decision_id:
        parts.append(fresh_attribute(n.DECISION_ID, exchange.decision_id))
    if exchange.tool_calls_blocked:
        parts.append(attribute(n.TOOL_CALLS_BLOCKED, exchange.tool_calls_blocked))
    parts.append(usage)
    return b"".join(parts)
