"""An OPA-protocol server for tests: OPA's REST Data API in front of the same policy files,
evaluated with regopy through a plain query (not the gateway's compiled bundles); a failed
evaluation is answered with OPA's own error text, from OPA's engine (tests/policy/opa_reference.py).

The real OPA binary cannot be installed from the registries here; this server speaks the
part of OPA's documented API the gateway uses, so the gateway's client is written against
that API and works against a real OPA too:

    POST /v1/data/{path}[?provenance=true]  {"input": ...}
        -> 200 {"result": ..., "decision_id": ...}   no "result" when undefined
        -> 400 {"code": "invalid_parameter", "message": ...}   body not JSON
        -> 500 {"code": "internal_error", "message": "file:row: code: text"}   evaluation failed
    GET /health -> 200 {}

Faults for tests: `delay_s` (answer late), `fail_status` (answer with that status),
`result_override` (answer with this result instead of the policy's). `compiled=True`
evaluates with the gateway's own compiled bundles instead (faster; for bench/policy.py,
which measures the client, not this server).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import regopy
from aiohttp import web

from adapters.policy.compiled import add_source, compile_revision
from adapters.policy.source import read_policy_dir

_UNSET = object()


class OpaProtocolServer:
    def __init__(self, directory: str, *, compiled: bool = False) -> None:
        self.source = read_policy_dir(directory)
        self._interpreter = regopy.Interpreter()
        add_source(self._interpreter, self.source, tests=False)
        self._compiled = (
            compile_revision(self.source, "gateway/authz/decision").evaluator() if compiled else None
        )
        self.delay_s = 0.0
        self.fail_status: int | None = None
        self.result_override: Any = _UNSET
        self.requests = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def override_result(self, value: Any) -> None:
        self.result_override = value

    def clear_faults(self) -> None:
        self.delay_s, self.fail_status, self.result_override = 0.0, None, _UNSET

    async def _data(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_status is not None:
            return _json({"code": "internal_error", "message": "injected failure"}, self.fail_status)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return _json({"code": "invalid_parameter", "message": f"body is not JSON: {exc}"}, 400)
        answer: dict[str, Any] = {"decision_id": str(uuid.uuid4())}
        if request.query.get("provenance") == "true":
            answer["provenance"] = {
                "version": "test",
                "bundles": {"policies": {"revision": self.source.revision}},
            }
        if self.result_override is not _UNSET:
            answer["result"] = self.result_override
            return _json(answer, 200)
        if self._compiled is not None:
            evaluation = self._compiled.evaluate(orjson.dumps(body.get("input")).decode())
            if evaluation.value is not None:
                answer["result"] = evaluation.value
            return _json(answer, 200)
        path = request.match_info["path"].strip("/").replace("/", ".")
        interpreter = self._interpreter
        interpreter.set_input_term(orjson.dumps(body.get("input")).decode())
        output = interpreter.query(f"x := data.{path}")
        if not output.ok():
            return _json({"code": "internal_error", "message": self._opa_error(path, body.get("input"))}, 500)
        if output.results and "x" in output.results[0].bindings:
            answer["result"] = output.results[0].bindings["x"]
        return _json(answer, 200)

    def _opa_error(self, path: str, input_doc: Any) -> str:
        """What OPA says of this failed evaluation (`file:row: code: text`), from OPA's own engine."""
        from tests.policy.opa_reference import OpaError, decide, opa_engine

        try:
            with opa_engine(self.source.policy_modules, self.source.data) as reference:
                decide(reference, path, input_doc)
        except OpaError as exc:
            return exc.message
        return "evaluation failed"

    async def _health(self, _: web.Request) -> web.Response:
        return _json({}, 200)

    def start(self, port: int = 0) -> None:
        """Listen on `port` (0: any free one); start(server.port) after stop() reopens the same port."""
        ready = threading.Event()
        loop = self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._start(port))
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="opa-protocol-server", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the OPA-protocol server did not start")

    def stop(self) -> None:
        if self._thread is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    async def _start(self, port: int) -> None:
        app = web.Application()
        app.router.add_post("/v1/data/{path:.*}", self._data)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _json(body: dict[str, Any], status: int) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


@contextmanager
def opa_protocol_server(directory: str) -> Iterator[OpaProtocolServer]:
    server = OpaProtocolServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str]) -> None:
    """`python -m tests.policy.opa_server DIR PORT [--compiled]`: serve until killed (bench/policy.py)."""
    server = OpaProtocolServer(argv[0], compiled="--compiled" in argv)
    server.start(int(argv[1]))
    threading.Event().wait()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
