"""The response header that says the gateway set or lowered a request's output limit.

A policy's `limits.max_tokens`, a hard budget that covers fewer tokens, or the metering
default can each bound what the model may write; without a word, a long answer ending in
`finish_reason: length` looks like the model's doing. Whichever bounded it last is named.
"""

from __future__ import annotations

from typing import Literal

from gateway.exchange import Exchange

OUTPUT_LIMIT_HEADER = "x-tollgate-max-tokens"

Reason = Literal["policy", "budget", "default"]


def note_output_limit(exchange: Exchange, tokens: int, reason: Reason) -> None:
    """`x-tollgate-max-tokens: 4096; reason=policy`: the per-choice limit sent upstream."""
    exchange.response_headers[OUTPUT_LIMIT_HEADER] = f"{tokens}; reason={reason}"
