"""What a door's translation costs, over the chat door, in CPU per request, in one run.

    python -m bench.doors [--quick] [--no-doc] [--loaded] [--cold]

- translation (in process, the figure the target is on): for one request of each door, the
  door's own work: its body turned into the internal chat body (`Door.request`), and the
  guarded chat answer turned into its response (`Door.response`), or, streamed, its 16 text
  chunks and its finish chunk into its events (`Door.stream`). The chat door's own work
  (nothing to translate, the chunks relayed as they came) is measured the same way, in the
  same rounds, and subtracted. The chunks arrive parsed, as the usage guard leaves them in
  the pipeline (which records the usage chunk and keeps it from clients that did not ask for
  it: the doors do not ask, they read the recorded usage), each looked at first as the
  produced-text count looks at every chunk (`Chunk.text_delta`, kept on the chunk; the same
  for every door). CPU time (`time.process_time`), medians of interleaved rounds.
- end to end: one gateway worker in front of the simulator (zero-latency mode); the same
  conversation through each door in turn, sequentially on a keep-alive connection, non-streamed
  and streamed; the worker's CPU per request (utime + stime from /proc) for each door.
  Medians of interleaved rounds; noisier than the first, since it also counts the gateway's
  whole pipeline, which is the same for every door. A worker idle between two requests runs
  each with its caches cold, the door's code included: the least favourable case.
- caches cold (`--cold`): the first measure's door calls, each after `COLD_KIB` of memory
  was written (this machine's L2 per core), the stream shaped as the simulator's answer to
  the end-to-end bench (a tool call in five chunks): a worker runs a door's calls among the
  pipeline's, which evicts them, and this reproduces the end-to-end excess in process.
- under load (`--loaded`): the same worker loaded by wrk (`LOADED_CONNECTIONS` connections,
  a few seconds per door and mode, the doors in turn, rounds interleaved), as a gateway
  serving many agents runs; the gateway's CPU per request of each run, medians of the rounds.

Results go to bench/results/doors-*.json and the "Doors" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench import harness
from gateway.doors.base import Door
from gateway.doors.messages import MessagesDoor
from gateway.doors.openai import OpenAIDoor
from gateway.doors.responses import ResponsesDoor
from gateway.exchange import Endpoint, Exchange, Principal, Tenant, Usage
from gateway.ports import Chunk

TARGET_US = 50.0  # at most 0.05 ms of CPU per request over the chat door
LOADED_CONNECTIONS = 16
WORDS = [f"tok{i}" if i == 0 else f" tok{i}" for i in range(16)]
SYSTEM = "You are a careful assistant. Answer briefly."
QUESTION = "What is the weather in Oslo today, and should I take an umbrella?"
TOOLS_CHAT: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
BODIES: dict[str, dict[str, Any]] = {
    "chat": {
        "model": "chat",
        "max_tokens": 64,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        "tools": TOOLS_CHAT,
    },
    "responses": {
        "model": "chat",
        "max_output_tokens": 64,
        "instructions": SYSTEM,
        "input": QUESTION,
        "store": False,
        "tools": [{"type": "function", **TOOLS_CHAT[0]["function"]}],
    },
    "messages": {
        "model": "chat",
        "max_tokens": 64,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [
            {
                "name": "get_weather",
                "description": "The weather in a city.",
                "input_schema": TOOLS_CHAT[0]["function"]["parameters"],
            }
        ],
    },
}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
# End to end, the chat door is measured twice: the difference of the two is the noise floor.
E2E = {**PATHS, "chat again": PATHS["chat"]}
BODIES["chat again"] = BODIES["chat"]
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "sim-model",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "".join(WORDS)}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 40, "completion_tokens": 16, "total_tokens": 56},
}


def _chunks() -> list[dict[str, Any]]:
    envelope = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "sim-model"}
    out = [
        {
            **envelope,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
    ]
    out += [
        {**envelope, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in WORDS
    ]
    out.append({**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out


def _call_chunks(
    arguments: str = '{"city":"Oslo","unit":"celsius","days":3}', size: int = 4, role_apart: bool = False
) -> list[dict[str, Any]]:
    """A streamed tool call: its arguments in `size`-character pieces, as the simulator sends
    them; `role_apart`: the role in a chunk of its own first, as the simulator answers the
    end-to-end bench's body."""
    envelope = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "sim-model"}
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    if role_apart:
        out = [
            {**envelope, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            for delta in ({"role": "assistant", "content": None}, {"tool_calls": [call]})
        ]
    else:
        out = [{**envelope, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]}]
    for i in range(0, len(arguments), size):
        piece = {"tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + size]}}]}
        out.append({**envelope, "choices": [{"index": 0, "delta": piece, "finish_reason": None}]})
    out.append({**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return out


CHUNKS = {
    "streamed text": [(orjson.dumps(c), c) for c in _chunks()],
    "streamed tool call": [(orjson.dumps(c), c) for c in _call_chunks()],
}
# The simulator's answer to the end-to-end bench: role, the call's opening, two pieces, the finish
SHORT_CALL = [(orjson.dumps(c), c) for c in _call_chunks('{"city":"alpha"}', 8, role_apart=True)]
COLD_KIB = 2048  # written between a door's calls: this machine's L2 cache per core
MODES = ("non-streamed", *CHUNKS)
PRINCIPAL = Principal(Tenant("bench"), "k-bench")


def _doors() -> dict[str, Door]:
    return {
        "chat": OpenAIDoor("/v1/chat/completions", Endpoint.CHAT),
        "responses": ResponsesDoor(None),
        "messages": MessagesDoor(),
    }


def _exchange(door: Door) -> Exchange:
    exchange = Exchange("req-1", Endpoint.CHAT, 0.0, 1e9, {}, b"", principal=PRINCIPAL, door=door)
    exchange.model_alias = "chat"
    exchange.usage = Usage(40, 16, reported=True)
    return exchange


async def _one(door: Door, mode: str) -> None:
    exchange = _exchange(door)
    body = await door.request(orjson.loads(RAW[door.api]), exchange)
    if mode == "non-streamed":
        await door.response(exchange, orjson.loads(orjson.dumps(ANSWER)) | {"model": body["model"]})
        return
    encoder = door.stream(exchange)
    for raw, data in CHUNKS[mode]:
        chunk = Chunk(raw, data)
        chunk.text_delta()  # the produced-text count's look, the first guard's in the pipeline
        encoder.chunk(chunk)
    await encoder.done()


RAW = {("chat.completions" if name == "chat" else name): orjson.dumps(body) for name, body in BODIES.items()}


def translation(rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    """CPU µs per request of each door's own work, medians over interleaved rounds."""
    doors = _doors()
    loop = asyncio.new_event_loop()
    samples: dict[tuple[str, str], list[float]] = {(n, m): [] for n in doors for m in MODES}

    async def batch(door: Door, mode: str) -> None:
        for _ in range(per_round):
            await _one(door, mode)

    try:
        for _ in range(rounds):
            for mode in MODES:
                for name, door in doors.items():
                    started = time.process_time()
                    loop.run_until_complete(batch(door, mode))
                    samples[(name, mode)].append((time.process_time() - started) / per_round * 1e6)
    finally:
        loop.close()
    return {mode: {name: statistics.median(samples[(name, mode)]) for name in doors} for mode in MODES}


def _finished(coroutine: Any) -> Any:
    """A coroutine that never suspends (a door's, with nothing stored), run to its value."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise harness.BenchError("a door's coroutine suspended")


def cold_caches(rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    """CPU µs per request of each door's own work with its caches cold: `COLD_KIB` written
    between each two of its calls (the request, each chunk, the end), as a worker's pipeline
    runs between them. Only the door's calls are timed (`time.thread_time_ns`); medians over
    interleaved rounds."""
    doors = _doors()
    evict = bytearray(COLD_KIB << 10)
    ones = b"\1" * (len(evict) // 64)
    modes = {
        "non-streamed": [],
        "streamed text": CHUNKS["streamed text"],
        "streamed tool call (5 chunks)": SHORT_CALL,
    }
    samples: dict[tuple[str, str], list[float]] = {(n, m): [] for n in doors for m in modes}

    def timed(call: Any, *args: Any) -> int:
        evict[::64] = ones
        began = time.thread_time_ns()
        call(*args)
        return time.thread_time_ns() - began

    def one(door: Door, chunks: list[tuple[bytes, dict[str, Any]]]) -> int:
        exchange = _exchange(door)
        body = orjson.loads(RAW[door.api])
        spent = timed(lambda: _finished(door.request(body, exchange)))
        if not chunks:
            answer = orjson.loads(orjson.dumps(ANSWER)) | {"model": "chat"}
            return spent + timed(lambda: _finished(door.response(exchange, answer)))
        encoder = door.stream(exchange)
        for raw, _ in chunks:
            chunk = Chunk(raw, orjson.loads(raw))
            chunk.text_delta()  # the produced-text count's look
            spent += timed(encoder.chunk, chunk)
        return spent + timed(lambda: _finished(encoder.done()))

    for _ in range(rounds):
        for mode, chunks in modes.items():
            for name, door in doors.items():
                total = sum(one(door, chunks) for _ in range(per_round))
                samples[(name, mode)].append(total / per_round / 1e3)
    return {mode: {name: statistics.median(samples[(name, mode)]) for name in doors} for mode in modes}


def _gateway_config(sim_port: int, port: int, key_hash: str, tmp: Path) -> dict[str, Any]:
    return {
        "server": {"host": harness.HOST, "port": port, "workers": 1, "access_log": False},
        "upstreams": {"sim": {"kind": "openai_compat", "base_url": f"http://{harness.HOST}:{sim_port}/v1"}},
        "models": {"chat": [{"upstream": "sim", "model": "bench-upstream-model"}]},
        "tenants": {"bench": {"models": ["*"]}},
        "keys": [{"tenant": "bench", "hash": key_hash}],
        "responses": {"sqlite_path": str(tmp / "responses.db")},
    }


def _cpu_s(pid: int) -> float:
    """CPU time of every thread of a process, in nanosecond resolution (/proc's schedstat; its
    utime and stime count whole clock ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that has just ended
    return total / 1e9


@contextlib.contextmanager
def _one_worker() -> Iterator[tuple[Any, int, str, Path]]:
    """One gateway worker in front of the simulator (zero-latency mode), as the end-to-end
    measures run it: (its process, its port, an API key, a scratch directory); stopped after."""
    from gateway.keys import generate_key, hash_key

    with tempfile.TemporaryDirectory(prefix="tollgate-bench-doors-") as tmp_name:
        tmp = Path(tmp_name)
        procs = harness.Processes()
        try:
            _, sim_port = harness.start_simulator(procs, tmp)
            key = generate_key()
            port = harness.free_port()
            config = tmp / "gateway.yaml"
            config.write_text(json.dumps(_gateway_config(sim_port, port, hash_key(key), tmp)))
            log = tmp / "gateway.log"
            argv = [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
            ]
            proc = procs.start("gateway", argv, log)
            harness.wait_http_ok(f"http://{harness.HOST}:{port}/healthz", proc, "gateway", log)
            yield proc, port, key, tmp
        finally:
            procs.stop_all()


def end_to_end(rounds: int, warmup: int = 100) -> dict[str, dict[str, float]]:
    """The gateway worker's CPU µs per request through each door: medians over `rounds`
    requests of each door and mode, interleaved."""
    samples: dict[tuple[str, bool], list[float]] = {(n, s): [] for n in E2E for s in (False, True)}
    with _one_worker() as (proc, port, key, _):
        headers = {"content-type": "application/json", "authorization": f"Bearer {key}", "x-api-key": key}
        conn = http.client.HTTPConnection(harness.HOST, port, timeout=30)
        bodies = {(n, s): orjson.dumps({**BODIES[n], "stream": s}) for n in E2E for s in (False, True)}
        names = list(E2E)
        # Request by request, the doors in turn (each leading in turn), each request's own
        # CPU: the gateway is idle between two sequential requests, so the difference of
        # two readings is that request's; drift and neighbours' load hit every door alike.
        for index in range(warmup + rounds):
            order = names[index % len(names) :] + names[: index % len(names)]
            for stream in (False, True):
                for name in order:
                    before = _cpu_s(proc.pid)
                    conn.request("POST", E2E[name], bodies[(name, stream)], headers)
                    response = conn.getresponse()
                    response.read()
                    spent = _cpu_s(proc.pid) - before
                    if response.status != 200:
                        raise harness.BenchError(f"{E2E[name]}: {response.status}")
                    if index >= warmup:
                        samples[(name, stream)].append(spent * 1e6)
        conn.close()
    return _medians(samples)


def loaded(rounds: int, seconds: float) -> dict[str, dict[str, float]]:
    """The gateway's CPU µs per request through each door under wrk's load: medians over
    `rounds` runs of `seconds` of each door and mode, interleaved (the order rotating)."""
    samples: dict[tuple[str, bool], list[float]] = {(n, s): [] for n in E2E for s in (False, True)}
    with _one_worker() as (proc, port, key, tmp):
        url = f"http://{harness.HOST}:{port}"
        scripts = {}
        for name, stream in samples:
            # wrk's script of every bench; each door takes the key as a Bearer token
            script = tmp / f"{name.replace(' ', '-')}-{stream}.lua"
            body = orjson.dumps({**BODIES[name], "stream": stream}).decode()
            script.write_text(harness.WRK_SCRIPT.format(body=body, key=key))
            scripts[(name, stream)] = script
        for (name, _), script in scripts.items():  # warm: connections, caches, first decisions
            harness.wrk(url + E2E[name], script, LOADED_CONNECTIONS, 1)
        names = list(E2E)
        for index in range(rounds):
            order = names[index % len(names) :] + names[: index % len(names)]
            for stream in (False, True):
                for name in order:
                    script = scripts[(name, stream)]
                    run = harness.served_load(url + E2E[name], proc.pid, script, LOADED_CONNECTIONS, seconds)
                    if run["errors"] or run.get("non2xx"):
                        raise harness.BenchError(f"{E2E[name]}: wrk saw errors: {run}")
                    samples[(name, stream)].append(run["cpu_ms_per_request"] * 1000)
    return _medians(samples)


def _medians(samples: dict[tuple[str, bool], list[float]]) -> dict[str, dict[str, float]]:
    return {
        ("streamed" if stream else "non-streamed"): {
            name: statistics.median(samples[(name, stream)]) for name in E2E
        }
        for stream in (False, True)
    }


def _table(figures: dict[str, dict[str, float]], target: bool) -> list[str]:
    again = "chat again" in next(iter(figures.values()))
    head = "| | chat | responses | messages | responses - chat | messages - chat |"
    head += " chat again - chat (noise) |" if again else ""
    head += " met |" if target else ""
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for mode, by_door in figures.items():
        chat = by_door["chat"]
        extra = [by_door["responses"] - chat, by_door["messages"] - chat]
        row = f"| {mode} | {chat:.1f} µs | {by_door['responses']:.1f} µs | {by_door['messages']:.1f} µs | "
        row += " | ".join(f"{e:+.1f} µs" for e in extra) + " |"
        if again:
            row += f" {by_door['chat again'] - chat:+.1f} µs |"
        if target:
            row += f" {harness.met(max(extra) <= TARGET_US)} |"
        lines.append(row)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--loaded", action="store_true", help="also end to end under wrk's load")
    parser.add_argument("--cold", action="store_true", help="also the doors' work with their caches cold")
    args = parser.parse_args(argv)
    rounds = 5 if args.quick else 9
    meta = harness.run_meta(argv)
    with harness.machine_lock(max_wait_s=300):  # one benchmark at a time on a shared machine
        inproc = translation(rounds, 300 if args.quick else 1000)
        e2e = end_to_end(300 if args.quick else 1500)
        under_load = loaded(3 if args.quick else 5, 3.0) if args.loaded else None
        cold = cold_caches(5 if args.quick else 9, 150) if args.cold else None
    payload = {
        "meta": meta,
        "translation_us": inproc,
        "end_to_end_cpu_us": e2e,
        "loaded_cpu_us": under_load,
        "cold_translation_us": cold,
    }
    harness.save_results("doors", payload)
    print(json.dumps(payload, indent=2))
    markdown = "\n".join(
        [
            "## Doors",
            "",
            f"- Command: `python -m bench.doors{meta['args']}` · {meta['date']} · git {meta['git']}",
            "- Machine: 2-core VM shared with other work (other builds and test runs at the same time),",
            "  so absolute figures are noisy; compare within a table, whose figures come from one run.",
            "",
            "A door's own work per request, CPU (the target: at most 0.05 ms over the chat door):",
            "",
            *_table(inproc, target=True),
            "",
            "The gateway worker's CPU per request, end to end (one worker, the simulator upstream,",
            "sequential requests; the whole pipeline, the same for every door, is in each figure):",
            "",
            *_table(e2e, target=False),
            "",
            "Reading these: the first table is the translation itself (the target's measure), warm, as a",
            "tight loop runs it; the second is what a door costs a running gateway, translation included,",
            "and it is larger. Timed inside the worker (`python -m bench.doors_probe --door-timing`), a",
            "door's own code costs three to four times what the loop measures (its excess over the chat",
            "door's, in runs minutes apart: 3.9 times non-streamed, 2.9 times streamed), and that accounts",
            "for most of the difference between the tables; every figure scales with",
            "the machine's load (the chat door measured twice gives the noise floor).",
            *(
                [
                    "",
                    f"Under load (the same worker, wrk c{LOADED_CONNECTIONS}, runs of 3 s, medians of "
                    f"{3 if args.quick else 5} interleaved rounds; the gateway's CPU per request):",
                    "",
                    *_table(under_load, target=False),
                ]
                if under_load is not None
                else []
            ),
            *(
                [
                    "",
                    f"With its caches cold (`--cold`: {COLD_KIB} KiB written between each two of a door's",
                    "calls, as a worker's pipeline runs between them; only the door's calls timed, each",
                    "with two clock reads, so compare the differences):",
                    "",
                    *_table(cold, target=False),
                ]
                if cold is not None
                else []
            ),
        ]
    )
    if not args.no_doc:
        harness.update_doc("doors", markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
