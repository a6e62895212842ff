"""The server each worker process runs: uvicorn's, with a drain before it stops, and an
exit of its own when the master that started it is gone.

On SIGTERM (or SIGINT) uvicorn closes its listener at once and waits for the connections
it has. With several workers the listening socket is shared, so until every process holding
it has closed it the kernel goes on accepting connections that nobody serves: they hang,
then are reset. Here the listener stays open for the drain instead: /readyz answers 503
(a load balancer takes the instance out), a new model call is refused with 503 and
`Connection: close`, and the calls in flight (streams included) run to their end. The drain
lasts `server.drain_s` at least, and until nothing is in flight (at most the graceful
shutdown timeout); then uvicorn's own shutdown closes the listener and the connections.

A worker started by `tollgate serve --workers N` is also told its master's pid: on Linux
the kernel sends it SIGTERM when the master dies (PR_SET_PDEATHSIG), and everywhere it
watches its parent pid, so a master killed with SIGKILL never leaves workers serving on
the port (a restart would then fail with "address in use").
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from typing import Any

import uvicorn

from gateway.http import GatewayASGI

logger = logging.getLogger("tollgate.server")

_PR_SET_PDEATHSIG = 1
_PARENT_CHECK_TICKS = 10  # uvicorn ticks every 0.1 s: the parent pid is checked each second


class WorkerServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain_s: float, master_pid: int | None = None) -> None:
        super().__init__(config)
        self._drain_s = drain_s
        self._master_pid = master_pid

    async def on_tick(self, counter: int) -> bool:
        if (
            self._master_pid is not None
            and counter % _PARENT_CHECK_TICKS == 0
            and os.getppid() != self._master_pid
            and not self.should_exit
        ):
            logger.error("the master process is gone: stopping this worker", extra={"pid": os.getpid()})
            self.should_exit = True
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self._drain()
        await super().shutdown(sockets)

    async def _drain(self) -> None:
        app = _gateway_app(self.config.loaded_app)
        if app is None:
            return
        app.begin_draining()
        logger.info("draining", extra={"in_flight": app.in_flight, "drain_s": self._drain_s})
        await asyncio.sleep(self._drain_s)
        rest = max(0.0, (self.config.timeout_graceful_shutdown or 0) - self._drain_s)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(rest):
                await app.idle()


def exit_with_master(master_pid: int) -> None:
    """In a worker: be sent SIGTERM when the master dies (Linux), and stop now if it
    already has (it may have died before this ran)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            logger.warning("PR_SET_PDEATHSIG refused; the parent pid watch alone stops this worker")
    if os.getppid() != master_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def _gateway_app(app: Any) -> GatewayASGI | None:
    """The gateway's ASGI app under whatever middleware uvicorn wrapped it in."""
    for _ in range(8):
        if isinstance(app, GatewayASGI):
            return app
        app = getattr(app, "app", None)
    return None
