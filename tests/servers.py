"""Real servers for tests: the gateway on uvicorn in a background thread, over loopback."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.http_protocol import HTTP_PROTOCOL, KEEP_ALIVE_S
from gateway.keys import hash_key

TEST_KEY = "tg-test-key-alpha"
OTHER_TENANT_KEY = "tg-test-key-beta"
UPSTREAM_KEY = "sim-upstream-secret"
# The key of the ids sent upstream, so that a test can tell which upstream request was a
# gateway request's (tests.harness.recorded).
REQUEST_ID_KEY = "tollgate-tests-request-id-key"


def gateway_config(upstreams: dict[str, Any], models: dict[str, Any], **overrides: Any) -> GatewayConfig:
    data: dict[str, Any] = {
        "server": {"access_log": False, "request_timeout_s": 30, "request_id_key": REQUEST_ID_KEY},
        "upstreams": upstreams,
        "models": models,
        "tenants": {"alpha": {"models": ["*"]}, "beta": {"models": [next(iter(models))]}},
        "keys": [
            {"tenant": "alpha", "hash": hash_key(TEST_KEY), "label": "tests"},
            {"tenant": "beta", "hash": hash_key(OTHER_TENANT_KEY)},
        ],
        # Off unless a test turns them on (`sessions={"enabled": True, ...}`): without a state
        # block, session records would go to tollgate-state.db in the working directory.
        "sessions": {"enabled": False},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return GatewayConfig.model_validate(data)


class RunningGateway:
    def __init__(self, server: uvicorn.Server, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        sockets = server.servers[0].sockets
        self.port: int = sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.url + "/v1"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)


@contextmanager
def running_gateway(config: GatewayConfig) -> Iterator[RunningGateway]:
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host="127.0.0.1",
            port=0,
            loop="asyncio",
            http=HTTP_PROTOCOL,
            lifespan="on",
            access_log=False,
            proxy_headers=False,
            log_config=None,
            timeout_keep_alive=KEEP_ALIVE_S,  # as `tollgate serve`'s
            timeout_graceful_shutdown=2,
        )
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    for _ in range(500):
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.01)
    if not server.started:
        raise RuntimeError("gateway did not start")
    running = RunningGateway(server, thread)
    try:
        yield running
    finally:
        running.stop()
