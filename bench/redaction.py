"""What redaction costs: detection on a 100 KB request, streaming, and gateway throughput.

    python -m bench.redaction [--quick] [--no-doc]

- detect: `redact_request` on a 100 KB chat request (about 50 entities), mask and tokenize,
  and the engines compared on the same text: the Hyperscan prefilter with exact confirmation
  (what runs), the exact patterns alone with the `regex` module, and the stdlib `re`. Each
  run starts with the catalog's table of texts seen emptied: every text is new.
- session: the 40th request of an agent session (its history sent again), every text new
  against the earlier turns' texts seen before (`gateway/redaction/seen.py`).
- scrub: `Scrubber.record` on access-log lines (new ids each, and a line seen before).
- stream: the sliding window's cost per chunk, and, through a running gateway in front of the
  simulator, the time to the first content event with `response: mask` against `off`.
- throughput: wrk at c64 against one gateway (2 workers, access log on) for two tenants, one
  with `request: mask, response: mask`, one without redaction, alternating, medians.

Results go to bench/results/redaction-*.json and the "Redaction" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import http.client
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import harness as spine
from gateway.exchange import Endpoint
from gateway.keys import generate_key, hash_key
from gateway.policy.decision import RedactRules
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN
from gateway.redaction.request import redact_request
from gateway.redaction.scrub import Scrubber, marker
from gateway.redaction.state import RedactionState
from gateway.redaction.window import SlidingWindow

ENTITIES = [
    "jane.doe@example.com",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "+1 (415) 555-2671",
    "078-05-1120",
    "10.0.12.7",
    "2001:db8::ff00:42:8329",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "Bearer abcdefghijklmnop1234567890",
]
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "this",
    "are",
    "or",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "there",
    "been",
    "one",
    "all",
    "we",
    "their",
    "has",
    "would",
    "when",
    "if",
    "so",
    "no",
    "will",
    "what",
    "can",
    "more",
    "about",
    "function",
    "return",
    "value",
    "config",
    "server",
    "request",
    "model",
    "token",
    "stream",
    "error",
    "order",
    "invoice",
    "shipment",
]
FILLERS = [
    "order #48213977",
    "at 2024-05-17T12:30:45Z",
    "version 1.2.3",
    "ts=1715950000",
    "x = [1, 2, 3]",
    "price $1,299.99",
    "id 9f8e7d6c5b4a",
    "HTTP/1.1 200 OK",
    "port 8080",
    "ref 20240517-0042",
]


def prose(size: int, seed: int, entities: bool = True) -> str:
    """English-like text with numbers, dates and code, and an entity every ~2 KB."""
    rnd = random.Random(seed)
    out: list[str] = []
    length = 0
    while length < size:
        roll = rnd.random()
        piece = (
            rnd.choice(ENTITIES)
            if entities and roll < 0.005
            else rnd.choice(FILLERS)
            if roll < 0.08
            else rnd.choice(WORDS)
        )
        out.append(piece + (".\n" if rnd.random() < 0.02 else ""))
        length += len(piece) + 1
    return " ".join(out)[:size]


def chat_body(size: int) -> dict[str, Any]:
    parts = [prose(size // 4, seed) for seed in range(4)]
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": parts[0]},
            {"role": "user", "content": parts[1]},
            {"role": "tool", "tool_call_id": "c1", "content": parts[2]},
            {"role": "user", "content": [{"type": "text", "text": parts[3]}]},
        ],
    }


def median_ms(run: Callable[[], object], repeat: int, setup: Callable[[], Any] | None = None) -> float:
    return timed_ms(run, repeat, setup)[0]


def timed_ms(
    run: Callable[[], object], repeat: int, setup: Callable[[], Any] | None = None
) -> tuple[float, float]:
    """Median wall time and median CPU time of this process, in ms: on a shared machine the
    CPU time says what the code costs, the wall time what a caller waited."""
    wall, cpu = [], []
    for _ in range(repeat):
        argument = setup() if setup else None
        started, started_cpu = time.perf_counter(), time.process_time()
        run() if argument is None else run(argument)  # type: ignore[call-arg]
        cpu.append((time.process_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def detect(repeat: int) -> dict[str, Any]:
    started = time.perf_counter()
    catalog = Catalog(BUILTIN)
    compile_ms = (time.perf_counter() - started) * 1000
    detector = catalog.detector()
    body = chat_body(100_000)
    size = len(json.dumps(body))
    results: dict[str, Any] = {"body_bytes": size, "compile_ms": compile_ms}
    for mode in ("mask", "tokenize"):

        def apply(fresh: dict[str, Any], mode: str = mode) -> None:
            # A detector per request, as the redact stage makes it.
            state = RedactionState(RedactRules(mode, "off"), catalog.detector(per_request=True), False)  # type: ignore[arg-type]
            redact_request(Endpoint.CHAT, fresh, state, False)

        def first_sight() -> dict[str, Any]:
            catalog.seen.clear()  # every text new, as in a conversation's first request
            return copy.deepcopy(body)

        wall, cpu = timed_ms(apply, repeat, first_sight)  # type: ignore[arg-type]
        results[f"request_{mode}_ms"], results[f"request_{mode}_cpu_ms"] = wall, cpu
    text = prose(100_000, 11)
    clean = prose(100_000, 12, entities=False)
    results["entities_in_text"] = len(detector.find(text))
    results["engine_hyperscan_ms"] = median_ms(lambda: detector.find(text), repeat)
    results["engine_hyperscan_clean_ms"] = median_ms(lambda: detector.find(clean), repeat)
    results["engine_regex_ms"] = median_ms(lambda: detector.scan(text, 0, final=True), max(3, repeat // 10))
    stdlib = [re.compile(p, re.ASCII) for kind in BUILTIN for p in kind.patterns]
    results["engine_re_ms"] = median_ms(
        lambda: [m for p in stdlib for m in p.finditer(text)], max(3, repeat // 10)
    )
    return results


def session_turn(turns: int, repeat: int) -> dict[str, Any]:
    """The last request of an agent session: its whole history sent again (a user message, a
    tool call and a ~2 KB tool result per turn), masked; the catalog's table of texts seen
    cleared before each run (every text new), or holding the earlier turns' texts (what a
    gateway that served the session so far holds)."""
    catalog = Catalog(BUILTIN)
    messages: list[dict[str, Any]] = [{"role": "system", "content": prose(4000, 1000)}]
    for turn in range(turns):
        messages.append({"role": "user", "content": prose(600, 2000 + turn)})
        arguments = json.dumps({"query": prose(200, 3000 + turn)})
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "search", "arguments": arguments}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": prose(2000, 4000 + turn)})
    body = {"model": "m", "messages": messages}
    previous = {"model": "m", "messages": messages[:-3]}

    def apply(fresh: dict[str, Any]) -> None:
        state = RedactionState(RedactRules("mask", "off"), catalog.detector(per_request=True), False)
        redact_request(Endpoint.CHAT, fresh, state, False)

    def new() -> dict[str, Any]:
        catalog.seen.clear()
        return copy.deepcopy(body)

    def history_seen() -> dict[str, Any]:
        catalog.seen.clear()
        apply(copy.deepcopy(previous))  # the turns before this one, as the gateway served them
        return copy.deepcopy(body)

    new_wall, new_cpu = timed_ms(apply, repeat, new)  # type: ignore[arg-type]
    seen_wall, seen_cpu = timed_ms(apply, repeat, history_seen)  # type: ignore[arg-type]
    return {
        "turns": turns,
        "body_bytes": len(json.dumps(body)),
        "new_ms": new_wall,
        "new_cpu_ms": new_cpu,
        "seen_ms": seen_wall,
        "seen_cpu_ms": seen_cpu,
    }


def access_line(i: int) -> dict[str, Any]:
    """What the access log passes to the scrubber: a few unique ids, the rest recurring."""
    return {
        "ts": f"2026-11-22T06:40:{10 + i // 1000 % 50:02d}.{i % 1000:03d}Z",
        "level": "info",
        "logger": "tollgate.access",
        "msg": "request",
        "request_id": f"req_{random.getrandbits(80):020x}",
        "tenant": "acme",
        "key_id": "k_3f9a2b",
        "endpoint": "chat",
        "model": "chat",
        "upstream": "local",
        "upstream_model": "sim-model",
        "attempts": 1,
        "stream": False,
        "status": 200,
        "error": None,
        "duration_ms": 3.21,
        "ttfb_ms": 1.5,
        "prompt_tokens": 12,
        "cached_tokens": 0,
        "completion_tokens": 5,
        "trace_id": f"{random.getrandbits(128):032x}",
        "span_id": f"{random.getrandbits(64):016x}",
    }


def scrub_cost(repeat: int) -> dict[str, Any]:
    """`Scrubber.record` on access-log lines: each with new ids, and one seen before."""
    scrubber = Scrubber(Catalog(BUILTIN).detector(), ["upstream-credential-123"])
    lines = [access_line(i) for i in range(repeat * 50)]
    for line in lines[:500]:  # the recurring values are known
        scrubber.record(line)
    started = time.process_time()
    for line in lines[500:]:
        scrubber.record(line)
    new_ids = (time.process_time() - started) * 1e6 / (len(lines) - 500)
    seen = lines[0]
    started = time.process_time()
    for _ in range(repeat * 50):
        scrubber.record(seen)
    all_seen = (time.process_time() - started) * 1e6 / (repeat * 50)
    return {"record_new_ids_cpu_us": new_ids, "record_all_seen_cpu_us": all_seen}


def window_cost(repeat: int) -> dict[str, Any]:
    detector = Catalog(BUILTIN).detector()
    text = prose(20_000, 5)
    chunks = [text[i : i + 4] for i in range(0, len(text), 4)]
    per_chunk = []
    for _ in range(max(1, repeat // 20)):
        window = SlidingWindow(detector, marker)
        started = time.perf_counter()
        for chunk in chunks:
            window.push(chunk)
        window.flush()
        per_chunk.append((time.perf_counter() - started) * 1e6 / len(chunks))
    first = median_ms(lambda: SlidingWindow(detector, marker).push("Sure, here it is: "), repeat)
    return {"us_per_4_char_chunk": statistics.median(per_chunk), "first_chunk_ms": first}


# --------------------------------------------------------------------------- the running gateway


def gateway_config(stack: spine.Stack, plain_hash: str, redacted_hash: str, port: int) -> dict[str, Any]:
    return {
        "server": {"host": spine.HOST, "port": port, "workers": 2, "access_log": True},
        "upstreams": {
            "fast": {"kind": "openai_compat", "base_url": f"http://{spine.HOST}:{stack.fast_port}/v1"},
            "sim": {"kind": "openai_compat", "base_url": f"http://{spine.HOST}:{stack.sim_port}/v1"},
        },
        "models": {
            spine.MODEL_ALIAS: [{"upstream": "fast", "model": "bench-upstream-model"}],
            spine.STREAM_ALIAS: [{"upstream": "sim", "model": "bench-upstream-model"}],
        },
        "tenants": {
            "plain": {"models": ["*"]},
            "redacted": {"models": ["*"], "redaction": {"request": "mask", "response": "mask"}},
        },
        "keys": [{"tenant": "plain", "hash": plain_hash}, {"tenant": "redacted", "hash": redacted_hash}],
    }


def start_gateway(stack: spine.Stack, plain_hash: str, redacted_hash: str) -> None:
    spine.serve_gateway(
        stack, "redaction", functools.partial(gateway_config, stack, plain_hash, redacted_hash)
    )


def first_content_ms(port: int, key: str, reply: str) -> float:
    body = json.dumps(
        {
            "model": spine.STREAM_ALIAS,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
            "x_sim": {"reply": reply, "chunk_chars": 4},
        }
    )
    connection = http.client.HTTPConnection(spine.HOST, port, timeout=10)
    started = time.perf_counter()
    connection.request("POST", spine.CHAT_PATH, body, {"authorization": f"Bearer {key}"})
    response = connection.getresponse()
    found = float("nan")
    while line := response.readline():
        if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
            found = (time.perf_counter() - started) * 1000
            break
    response.read()
    connection.close()
    return found


def gateway_figures(rounds: int, seconds: float, streams: int) -> dict[str, Any]:
    procs = spine.Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-redaction-"))
    plain_key, redacted_key = generate_key(), generate_key()
    try:
        stack = spine.start_stack(procs, tmp, "auto", 1)
        start_gateway(stack, hash_key(plain_key), hash_key(redacted_key))
        assert stack.gateway is not None
        reply = "Sure. Write to jane.doe@example.com or call +1 (415) 555-2671 about the invoice."
        ttft: dict[str, list[float]] = {"off": [], "mask": []}
        for i in range(streams):
            ttft["off"].append(first_content_ms(stack.gateway_port, plain_key, reply))
            ttft["mask"].append(first_content_ms(stack.gateway_port, redacted_key, reply))
            if i == 0:
                ttft = {"off": [], "mask": []}  # warm-up
        rps: dict[str, list[float]] = {"off": [], "mask": []}
        for _ in range(rounds):
            for name, key in (("off", plain_key), ("mask", redacted_key)):
                script = spine.write_wrk_script(dataclasses.replace(stack, api_key=key))
                run = spine.served_load(stack.gateway_url, stack.gateway.pid, script, 64, seconds)
                rps[name].append(run["rps"])
        return {
            "upstream": stack.upstream_kind,
            "ttft_off_ms": statistics.median(ttft["off"]),
            "ttft_mask_ms": statistics.median(ttft["mask"]),
            "rps_off": statistics.median(rps["off"]),
            "rps_mask": statistics.median(rps["mask"]),
            "rps_runs": rps,
        }
    finally:
        procs.stop_all()


def section(
    meta: dict[str, Any],
    d: dict[str, Any],
    w: dict[str, Any],
    g: dict[str, Any] | None,
    sc: dict[str, Any],
    se: dict[str, Any],
) -> str:
    loss = 100 * (1 - g["rps_mask"] / g["rps_off"]) if g else None
    lines = [
        "## Redaction",
        "",
        f"- Command: `python -m bench.redaction{meta['args']}` · {meta['date']} · git {meta['git']}",
        "- Machine: 2-core VM shared with other work; medians. In-process figures are single-threaded.",
        "",
        "| figure | result | target | met |",
        "|---|---|---|---|",
        f"| detect + mask a {d['body_bytes'] // 1000} KB request | {d['request_mask_ms']:.2f} ms "
        f"(CPU {d['request_mask_cpu_ms']:.2f} ms) | <= 2 ms | {spine.met(d['request_mask_ms'] <= 2)} |",
        f"| detect + tokenize the same request | {d['request_tokenize_ms']:.2f} ms "
        f"(CPU {d['request_tokenize_cpu_ms']:.2f} ms) | <= 2 ms "
        f"| {spine.met(d['request_tokenize_ms'] <= 2)} |",
        f"| an agent session's turn {se['turns']} ({se['body_bytes'] // 1000} KB, mask): every text new "
        f"/ earlier turns seen | {se['new_ms']:.2f} / {se['seen_ms']:.2f} ms (CPU {se['new_cpu_ms']:.2f} "
        f"/ {se['seen_cpu_ms']:.2f} ms) | | |",
    ]
    if g is not None:
        added = g["ttft_mask_ms"] - g["ttft_off_ms"]
        lines += [
            f"| time to first content, `response: mask` vs off | {g['ttft_mask_ms']:.2f} vs "
            f"{g['ttft_off_ms']:.2f} ms ({added:+.2f} ms) | added <= 1 ms | {spine.met(added <= 1)} |",
            f"| RPS at c64, `mask` both ways vs off | {g['rps_mask']:,.0f} vs {g['rps_off']:,.0f} "
            f"({loss:.1f} % less) | <= 10 % less | {spine.met(loss is not None and loss <= 10)} |",
        ]
    lines += [
        f"| sliding window, per 4-character chunk | {w['us_per_4_char_chunk']:.1f} µs | | |",
        f"| first chunk through a new window | {w['first_chunk_ms'] * 1000:.1f} µs | | |",
        f"| scrubbing an access-log line (new ids / all seen), CPU | {sc['record_new_ids_cpu_us']:.1f} / "
        f"{sc['record_all_seen_cpu_us']:.1f} µs | | |",
        "",
        f"Engines on 100 KB of text with {d['entities_in_text']} entities (all built-in kinds):",
        "",
        "| engine | time |",
        "|---|---|",
        f"| Hyperscan prefilter + exact confirmation (used) | {d['engine_hyperscan_ms']:.2f} ms "
        f"({d['engine_hyperscan_clean_ms']:.2f} ms on text without entities) |",
        f"| exact patterns alone, `regex` module | {d['engine_regex_ms']:.2f} ms |",
        f"| exact patterns alone, stdlib `re` | {d['engine_re_ms']:.2f} ms |",
        f"| compiling the catalog (once, at start) | {d['compile_ms']:.0f} ms |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redaction")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 1 round of 5 s")
    parser.add_argument("--no-gateway", action="store_true", help="in-process figures only")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    repeat = 20 if args.quick else 100
    d = detect(repeat)
    w = window_cost(repeat)
    sc = scrub_cost(repeat)
    se = session_turn(40, max(5, repeat // 5))
    g = None
    if not args.no_gateway:
        g = gateway_figures(1 if args.quick else 3, 5 if args.quick else 10, 30 if args.quick else 200)
    meta = spine.run_meta(argv)
    spine.save_results(
        "redaction", {"meta": meta, "detect": d, "window": w, "gateway": g, "scrub": sc, "session": se}
    )
    markdown = section(meta, d, w, g, sc, se)
    print(markdown)
    if not args.no_doc:
        spine.update_doc("redaction", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
