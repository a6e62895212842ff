"""What the spans say, read off the Exchange: GenAI semantic conventions v1.41.0 for upstream
attempts, the gateway's own ids and outcome for the server span.

Never message text, tool arguments, keys or header values: only ids the gateway made,
configured names, numbers, and the few strings a client or an upstream chooses (the model
alias a client asked for, the response model and finish reasons), which go through the
scrubber first (`SpanRecorder` remembers its answers for the values that recur).

The request id is not here: every span of the request carries it (`request_trace`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.exchange import Attempt, Exchange
from telemetry import names as n

Attributes = dict[str, Any]

# Attributes whose values are new for every request (ids, durations): encoded for the span,
# not kept in `otlp_wire`'s table of recurring (attribute, value) pairs.
FRESH = frozenset(
    {
        n.REQUEST_ID,
        n.DECISION_ID,
        n.GEN_AI_CONVERSATION_ID,
        n.TIME_TO_FIRST_TOKEN,
        n.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    }
)

# Request parameters that are plain numbers, copied to the attempt span when the body has them.
_REQUEST_NUMBERS = (
    ("max_tokens", n.GEN_AI_REQUEST_MAX_TOKENS),
    ("max_completion_tokens", n.GEN_AI_REQUEST_MAX_TOKENS),
    ("temperature", n.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", n.GEN_AI_REQUEST_TOP_P),
)


def attempt_attributes(
    exchange: Exchange, attempt: Attempt, provider: str, host: str, port: int, index: int
) -> Attributes:
    """Set when the attempt starts (the conventions want these available to samplers)."""
    attributes: Attributes = {
        n.GEN_AI_OPERATION_NAME: exchange.endpoint.operation,
        n.GEN_AI_PROVIDER_NAME: provider,
        n.GEN_AI_REQUEST_MODEL: attempt.model,
        n.SERVER_ADDRESS: host,
        n.SERVER_PORT: port,
        n.UPSTREAM: attempt.upstream,
        n.REPLICA: attempt.replica,
        n.ATTEMPT: index,
    }
    if index:
        previous = exchange.attempts[index - 1] if index <= len(exchange.attempts) else None
        same = previous is not None and previous.upstream == attempt.upstream
        attributes[n.ATTEMPT_KIND] = "retry" if same else "fallback"
    else:
        attributes[n.ATTEMPT_KIND] = "first"
    if exchange.stream:
        attributes[n.GEN_AI_REQUEST_STREAM] = True
    if exchange.session_key:
        attributes[n.GEN_AI_CONVERSATION_ID] = exchange.session_key  # already scoped and hashed
    body = exchange.body
    for field, attribute in _REQUEST_NUMBERS:
        value = body.get(field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[attribute] = value
    choices = body.get("n")
    if isinstance(choices, int) and not isinstance(choices, bool) and choices != 1:
        attributes[n.GEN_AI_REQUEST_CHOICE_COUNT] = choices
    return attributes


def served_attributes(exchange: Exchange, attempt: Attempt, scrub: Callable[[str], str]) -> Attributes:
    """The answer of the attempt that served the request."""
    attributes: Attributes = {}
    if attempt.status:
        attributes[n.HTTP_RESPONSE_STATUS_CODE] = attempt.status
    if exchange.response_model:
        attributes[n.GEN_AI_RESPONSE_MODEL] = scrub(exchange.response_model)
    if exchange.finish_reasons:
        attributes[n.GEN_AI_RESPONSE_FINISH_REASONS] = [scrub(r) for r in exchange.finish_reasons]
    if exchange.stream and attempt.ended_at is not None:
        attributes[n.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = attempt.ended_at - attempt.started_at
    usage = exchange.usage
    if usage.reported:
        attributes[n.GEN_AI_USAGE_INPUT_TOKENS] = usage.prompt_tokens
        attributes[n.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.completion_tokens
        attributes[n.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = usage.cached_tokens
        if usage.reasoning_tokens:
            attributes[n.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = usage.reasoning_tokens
    return attributes


def server_end_attributes(exchange: Exchange, workflow: str, scrub: Callable[[str], str]) -> Attributes:
    """Who asked, for what, and what became of it."""
    attributes: Attributes = {
        n.HTTP_RESPONSE_STATUS_CODE: exchange.status,
        n.GEN_AI_OPERATION_NAME: exchange.endpoint.operation,
        n.WORKFLOW: workflow,
    }
    principal = exchange.principal
    if principal is not None:
        attributes[n.TENANT] = principal.tenant.name
        attributes[n.KEY_ID] = principal.key_id
    if exchange.model_alias:
        attributes[n.MODEL_ALIAS] = scrub(exchange.model_alias)  # the client's choice
    if exchange.session_key:
        attributes[n.GEN_AI_CONVERSATION_ID] = exchange.session_key
    if exchange.error_code:
        attributes[n.ERROR_TYPE] = exchange.error_code
    if exchange.first_byte_at is not None:
        attributes[n.TIME_TO_FIRST_TOKEN] = exchange.first_byte_at - exchange.received_at
    decision = exchange.decision
    if decision is not None:
        attributes[n.DECISION_ALLOW] = decision.allow
    if exchange.decision_id:
        attributes[n.DECISION_ID] = exchange.decision_id
    if exchange.policy_revision:
        attributes[n.POLICY_REVISION] = exchange.policy_revision
    if exchange.tool_calls_blocked:
        attributes[n.TOOL_CALLS_BLOCKED] = exchange.tool_calls_blocked
    if exchange.attempts:
        attributes[n.UPSTREAM] = exchange.attempts[-1].upstream
    usage = exchange.usage
    if usage.reported:
        attributes[n.GEN_AI_USAGE_INPUT_TOKENS] = usage.prompt_tokens
        attributes[n.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.completion_tokens
        attributes[n.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = usage.cached_tokens
    return attributes
