"""An OTLP/HTTP sink for benchmarks: takes every POST (spans, metrics) with 200 and an empty
response message, counting requests and bytes without decoding them (GET /stats)."""

from __future__ import annotations

import argparse
import json

from aiohttp import web


def app() -> web.Application:
    stats = {"posts": 0, "bytes": 0}

    async def take(request: web.Request) -> web.Response:
        body = await request.read()
        stats["posts"] += 1
        stats["bytes"] += len(body)
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def report(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(stats), content_type="application/json")

    application = web.Application(client_max_size=64 * 1024 * 1024)
    application.router.add_post("/v1/traces", take)
    application.router.add_post("/v1/metrics", take)
    application.router.add_get("/stats", report)
    application.router.add_get("/health", report)
    return application


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.otlp_sink")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(app(), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
