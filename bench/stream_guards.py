"""The response guards' work per streamed chunk, in process: the whole pipeline's guards
(produced text, redaction masking, the tool-call guard, usage) and the chat door's encoder
over a stream shaped as the simulator sends it (a role chunk, text deltas of one token
each, the finish chunk), for a request whose decision allows tools.

    python -m bench.stream_guards [--streams 3000] [--rounds 5] [--tokens 16] [--per-read N]
                                  [--response mask|off] [--shape text|tool] [--tree PATH]

`--shape tool`: a tool call instead of text (the role chunk, the call's opening, its
arguments in `--tokens` pieces, the finish), of a tool the decision allows.

`--per-read N`: the chunks each upstream read brings (after the first chunk, which goes out
alone), as `Pipeline.relay` tells the guards (`Exchange.more_in_hand`): 1 for a stream paced
by its model, where every chunk is its own read; 0 for all of them in one read, as a fast
upstream answers a busy gateway. Prints CPU microseconds per stream and per chunk, the least
of `--rounds` rounds. `--tree`
runs the same measure on another checkout's `gateway` package (a fresh process with that
tree first on its path), alternating with this one, to compare two codes in one run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import orjson

PROSE = (
    "The quick brown fox jumps over the lazy dog while the model writes an answer of plain "
    "words, numbers like 42 and 1999, and punctuation, as most streamed answers are."
)
WORDS = PROSE.split(" ")


def stream_events(tokens: int, shape: str = "text") -> list[bytes]:
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1764633600, "model": "m"}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return orjson.dumps({**head, "choices": [choice]})

    if shape == "tool":  # one call of the allowed tool, its arguments a token a chunk
        opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather"}}
        events = [event({"role": "assistant", "content": None}), event({"tool_calls": [opening]})]
        pieces = ['{"city": "', *(WORDS[n % len(WORDS)] + " " for n in range(tokens - 2)), '"}']
        events += [event({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces]
        events.append(event({}, "tool_calls"))
        return events
    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": " " + WORDS[n % len(WORDS)]}) for n in range(tokens)]
    events.append(event({}, "stop"))
    return events


def measure(
    streams: int, rounds: int, tokens: int, per_read: int = 1, response: str = "mask", shape: str = "text"
) -> list[float]:
    from gateway.doors.openai import OPENAI_STREAM
    from gateway.exchange import Endpoint, Exchange
    from gateway.forward import Forwarder
    from gateway.guards import UsageGuard
    from gateway.metering.produced import ProducedText
    from gateway.pipeline import Pipeline
    from gateway.policy.decision import Decision, RedactRules, ToolRules
    from gateway.ports import Chunk
    from gateway.redaction.detector import Catalog
    from gateway.redaction.entities import BUILTIN
    from gateway.redaction.guard import RedactionGuard
    from gateway.redaction.state import RedactionCounters, RedactionState
    from gateway.tools.response_guard import ToolCallGuard

    guards = (ProducedText(), RedactionGuard(RedactionCounters()), ToolCallGuard(), UsageGuard())
    pipeline = Pipeline((), Forwarder({}), guards, ())
    catalog = Catalog(BUILTIN)
    decision = Decision(allow=True, tools=ToolRules(allowed=frozenset({"get_weather"})))
    events = stream_events(tokens, shape)
    tells = hasattr(Exchange("x", Endpoint.CHAT, 0.0, 1.0, {}, b""), "more_in_hand")  # a code before it: no
    # After the first chunk, whether each has others of its read after it.
    reads = per_read if per_read > 0 else len(events)
    more = [False] + [n + 1 < len(events) and (n - 1) % reads != reads - 1 for n in range(1, len(events))]
    per_stream: list[float] = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(streams):
            exchange = Exchange("req-bench", Endpoint.CHAT, 0.0, 60.0, {}, b"")
            exchange.decision = decision
            rules = RedactRules("mask", response)  # type: ignore[arg-type]
            exchange.redaction = RedactionState(rules, catalog.detector(per_request=True), False)
            for raw, follows in zip(events, more, strict=True):
                if tells:
                    exchange.more_in_hand = follows
                for out in pipeline.guard_chunk(exchange, Chunk(raw), 0):
                    OPENAI_STREAM.chunk(out)
            if tells:
                exchange.more_in_hand = False
            for index, guard in enumerate(pipeline.guards):
                for held in guard.on_end(exchange):
                    for out in pipeline.guard_chunk(exchange, held, index + 1):
                        OPENAI_STREAM.chunk(out)
        per_stream.append((time.process_time() - started) / streams * 1e6)
    return per_stream


def _child(tree: str, argv: list[str]) -> list[float]:
    """This file run in a fresh process with `tree` first on its path (by its path: the
    other tree's `bench` package may not have it)."""
    from bench.inproc import run_child

    return [
        float(x) for x in json.loads(run_child(tree, __file__, ["--child", *argv]).strip().splitlines()[-1])
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=16, help="text deltas per stream")
    parser.add_argument("--per-read", type=int, default=1, help="chunks per upstream read (0: all)")
    parser.add_argument("--response", default="mask", help="the response's redaction mode (off: none)")
    parser.add_argument("--shape", choices=("text", "tool"), default="text", help="text, or a tool call")
    parser.add_argument("--tree", help="also this checkout's gateway, alternating (before)")
    parser.add_argument("--pairs", type=int, default=3, help="with --tree: processes of each, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    measured = ["--streams", str(args.streams), "--rounds", str(args.rounds), "--tokens", str(args.tokens)]
    measured += ["--per-read", str(args.per_read), "--response", args.response, "--shape", args.shape]
    if args.child:
        figures = measure(args.streams, args.rounds, args.tokens, args.per_read, args.response, args.shape)
        print(json.dumps(figures))
        return
    chunks = len(stream_events(args.tokens, args.shape))
    trees = {"this": str(Path(__file__).parents[1])}
    if args.tree:
        trees = {"before": str(Path(args.tree).resolve()), **trees}
    for pair in range(args.pairs if args.tree else 1):
        for name, tree in trees.items():
            least = min(_child(tree, measured))
            per_chunk = least / chunks
            print(f"{pair + 1} {name:7} {least:8.1f} us a stream  {per_chunk:6.2f} us a chunk ({chunks})")


if __name__ == "__main__":
    main()
