"""A response guard that counts generated text, so a response without usage (from a server
that does not report it, a stream the client abandoned, or one the upstream cut) can still be
metered with what it produced (gateway/metering/counted.py).

It goes first among the guards: text another guard holds back or drops was still generated.
"""

from __future__ import annotations

from typing import Any

from gateway.exchange import Exchange
from gateway.metering.estimate import generated_chars
from gateway.ports import Chunk


class ProducedText:
    def on_response(self, exchange: Exchange, body: dict[str, Any]) -> None:
        exchange.produced_chars += generated_chars(body.get("choices"), "message")

    def on_chunk(self, exchange: Exchange, chunk: Chunk) -> list[Chunk]:
        plain = chunk.text_delta()  # most chunks: one text, counted without a walk
        if plain is None:
            exchange.produced_chars += generated_chars(chunk.data.get("choices"), "delta")
        elif plain[1] != "refusal":
            exchange.produced_chars += len(plain[2])
        return [chunk]

    def on_end(self, exchange: Exchange) -> list[Chunk]:
        return []
