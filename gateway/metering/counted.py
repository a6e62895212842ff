"""The gateway's own count of a response's usage, for when the upstream reports none.

Some servers ignore `stream_options.include_usage` (llama-cpp-python's, for one) or send
no usage at all; such a response is still metered, on the input bound (what was reserved)
and the generated text relayed (content, reasoning and tool-call arguments) at 4 characters
a token, capped at the output bound. The Usage says it was counted, not reported, so the
ledger, metrics, spans and the decision log can tell the two apart.
"""

from __future__ import annotations

from gateway.exchange import Exchange, Usage
from gateway.metering.estimate import input_tokens_bound, produced_tokens, requested_output


def answered(exchange: Exchange) -> bool:
    """Whether an upstream answered (some attempt got its 200), so there is usage to count."""
    return any(attempt.status == 200 for attempt in exchange.attempts)


def counted_usage(exchange: Exchange) -> Usage:
    ticket = exchange.meter
    prompt = (
        ticket.input_tokens if ticket is not None and ticket.input_tokens else input_tokens_bound(exchange)
    )
    completion = produced_tokens(exchange.produced_chars)
    bound = ticket.output_tokens if ticket is not None and ticket.output_tokens else None
    if bound is None:
        per_choice = requested_output(exchange.body)
        if per_choice is not None:
            choices = exchange.body.get("n")
            bound = per_choice * (choices if isinstance(choices, int) and choices > 0 else 1)
    if bound is not None:
        completion = min(completion, bound)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, counted=True)


def settle_usage(exchange: Exchange) -> Usage:
    """The usage to meter: the upstream's when it reported it, else the gateway's count when an
    upstream answered, else nothing. Sets it on the exchange, once."""
    usage = exchange.usage
    if usage.reported or usage.counted or not answered(exchange):
        return usage
    exchange.usage = usage = counted_usage(exchange)
    return usage


class CountedUsage:
    """The first finisher: a response that ended without usage (no usage chunk, a stream cut
    short or abandoned) gets the gateway's count before anything settles or records it."""

    name = "counted_usage"

    async def finish(self, exchange: Exchange) -> None:
        settle_usage(exchange)
