"""The upstream HTTP client alone: the CPU one process spends per request, the gateway's
client (`adapters/upstream/http_client.py`) against aiohttp's as the gateway used it before
(one session, the same timeouts, no cookies, auto-decompression), in alternating rounds of
the same process, against the benchmark's nginx.

    python -m bench.upstream_client [--rounds 5] [--requests 4000]

Two loads: one request at a time, and 64 at once. The body posted is the end-to-end
benchmarks' chat body, the answer nginx's fixed completion. The figure is the client's
whole cost as a proxy pays it, system calls included (both send and receive the same bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import uvloop

from adapters.upstream.http_client import HttpClient
from bench.harness import CHAT_BODY, HOST, Processes, start_nginx

CONCURRENCY = 64
HEADERS = {
    "content-type": "application/json",
    "authorization": "Bearer upstream-key",
    "x-request-id": "b" * 32,
}

Post = Callable[[], Awaitable[int]]


async def _cpu_per_request(post: Post, requests: int, concurrency: int) -> float:
    async def worker(count: int) -> None:
        for _ in range(count):
            status = await post()
            if status != 200:
                raise RuntimeError(f"the upstream answered {status}")

    share = requests // concurrency
    await asyncio.gather(*[worker(50 // concurrency + 1) for _ in range(concurrency)])  # warm
    started = time.process_time()
    await asyncio.gather(*[worker(share) for _ in range(concurrency)])
    return (time.process_time() - started) / (share * concurrency) * 1e6


async def _measure(url: str, rounds: int, requests: int) -> dict[str, dict[str, list[float]]]:
    body = CHAT_BODY.encode()
    ours = HttpClient("bench", max_connections=200, connect_timeout=5.0)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=200, ttl_dns_cache=300),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=True,
        raise_for_status=False,
        skip_auto_headers=("User-Agent",),
    )

    async def with_ours() -> int:
        return (await ours.post(url, body, dict(HEADERS), 30.0, 30.0)).status

    async def with_aiohttp() -> int:
        timeout = aiohttp.ClientTimeout(total=30.0, connect=5.0, sock_read=30.0)
        async with session.post(url, data=body, headers=dict(HEADERS), timeout=timeout) as response:
            await response.read()
            return response.status

    results: dict[str, dict[str, list[float]]] = {
        load: {"aiohttp": [], "tollgate": []} for load in ("one at a time", f"{CONCURRENCY} at once")
    }
    try:
        for _ in range(rounds):
            for load, concurrency in (("one at a time", 1), (f"{CONCURRENCY} at once", CONCURRENCY)):
                for name, post in (("aiohttp", with_aiohttp), ("tollgate", with_ours)):
                    results[load][name].append(await _cpu_per_request(post, requests, concurrency))
    finally:
        await ours.aclose()
        await session.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upstream_client")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4000)
    args = parser.parse_args()
    procs = Processes()
    try:
        with tempfile.TemporaryDirectory(prefix="tollgate-bench-client-") as tmp:
            _, port = start_nginx(procs, Path(tmp), 1)
            url = f"http://{HOST}:{port}/v1/chat/completions"
            results = uvloop.run(_measure(url, args.rounds, args.requests))
    finally:
        procs.stop_all()
    print(f"CPU µs per request, median of {args.rounds} alternating rounds of {args.requests}:")
    print("| load | aiohttp | tollgate | tollgate / aiohttp |")
    print("|---|---|---|---|")
    for load, by_client in results.items():
        theirs, ours = statistics.median(by_client["aiohttp"]), statistics.median(by_client["tollgate"])
        print(f"| {load} | {theirs:.1f} | {ours:.1f} | {ours / theirs:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
