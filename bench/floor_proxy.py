"""The floor: a bare ASGI proxy with no checks, to measure the gateway against on the same machine.

Read the body, orjson-parse it, set `model`, re-serialise, POST it upstream with one
aiohttp session per worker, return the body (docs/benchmarks.md, "The floor", has what it
does on this machine); the overhead benchmark runs it as
`python -m bench.floor_proxy --upstream URL --port P --workers N` with the gateway's
uvicorn settings (uvloop, httptools, no access log), so that "how far is the gateway from
the floor" is measured in the same run rather than taken from another day's table.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import aiohttp
import orjson

_UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8081/v1/chat/completions")
_JSON = [(b"content-type", b"application/json")]


class FloorProxy:
    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200))
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if self.session is not None:
                        await self.session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["path"] in ("/healthz", "/health"):
            await send({"type": "http.response.start", "status": 200, "headers": _JSON})
            await send({"type": "http.response.body", "body": b'{"status":"ok"}'})
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = orjson.loads(b"".join(chunks))
        body["model"] = "bench-upstream-model"
        assert self.session is not None
        async with self.session.post(
            _UPSTREAM, data=orjson.dumps(body), headers={"content-type": "application/json"}
        ) as response:
            payload = await response.read()
            status = response.status
        await send({"type": "http.response.start", "status": status, "headers": _JSON})
        await send({"type": "http.response.body", "body": payload})


def app_factory() -> FloorProxy:
    return FloorProxy()


def main() -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.floor_proxy")
    parser.add_argument("--upstream", required=True, help="full URL of the upstream chat completions path")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    os.environ["FLOOR_UPSTREAM"] = args.upstream  # read again by each spawned worker
    uvicorn.run(
        "bench.floor_proxy:app_factory",
        factory=True,
        host="127.0.0.1",
        port=args.port,
        workers=args.workers,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,
        backlog=4096,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
