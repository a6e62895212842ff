"""The master process of `tollgate serve` with more than one worker.

It binds the listening socket, starts the workers (each a `worker_server.WorkerServer`
sharing the socket), and starts a new one in place of a worker that dies. On SIGTERM or
SIGINT it first closes its own copy of the socket, so that once the workers have drained
and closed theirs the port refuses connections rather than queueing them for nobody;
then it has every worker drain (SIGTERM), waits for them, and kills any still running
after the time a drain may take.

A worker that exits with uvicorn's startup-failure code (the application, or its socket,
cannot start) is not replaced: it would fail the same way again, so the master stops.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import threading
import time
from multiprocessing.context import SpawnProcess
from types import FrameType

import uvicorn
from uvicorn._subprocess import get_subprocess
from uvicorn.config import STARTUP_FAILURE

from gateway.worker_server import WorkerServer, exit_with_master

logger = logging.getLogger("tollgate.server")

_CHECK_S = 0.5
_KILL_MARGIN_S = 10.0  # beyond the longest drain, before a worker that did not stop is killed


class Supervisor:
    def __init__(self, config: uvicorn.Config, workers: int, drain_s: float) -> None:
        self._config = config
        self._workers = workers
        self._drain_s = drain_s
        self._stop = threading.Event()

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT; the exit code (STARTUP_FAILURE if a worker could not start)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        listener = self._config.bind_socket()
        failed = False
        workers = [self._start(listener) for _ in range(self._workers)]
        try:
            while not self._stop.wait(_CHECK_S):
                for index, worker in enumerate(workers):
                    if worker.is_alive():
                        continue
                    worker.join()
                    if worker.exitcode == STARTUP_FAILURE:
                        logger.error("a worker failed to start: stopping", extra={"pid": worker.pid})
                        failed = True
                        self._stop.set()
                        break
                    logger.warning(
                        "a worker exited: starting another",
                        extra={"pid": worker.pid, "exit_code": worker.exitcode},
                    )
                    workers[index] = self._start(listener)
        finally:
            listener.close()
            self._stop_all(workers)
        return STARTUP_FAILURE if failed else 0

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._stop.set()

    def _start(self, listener: socket.socket) -> SpawnProcess:
        target = functools.partial(
            _worker_main, config=self._config, drain_s=self._drain_s, master_pid=os.getpid()
        )
        worker = get_subprocess(self._config, target, [listener])
        worker.start()
        return worker

    def _stop_all(self, workers: list[SpawnProcess]) -> None:
        for worker in workers:
            if worker.is_alive() and worker.pid is not None:
                os.kill(worker.pid, signal.SIGTERM)
        longest = self._drain_s + (self._config.timeout_graceful_shutdown or 0) + _KILL_MARGIN_S
        give_up_at = time.monotonic() + longest
        for worker in workers:
            worker.join(max(0.0, give_up_at - time.monotonic()))
        for worker in workers:
            if worker.is_alive():
                logger.error("a worker did not stop in time: killed", extra={"pid": worker.pid})
                worker.kill()
                worker.join()


def _worker_main(
    sockets: list[socket.socket], *, config: uvicorn.Config, drain_s: float, master_pid: int
) -> None:
    """A worker process's body (run by uvicorn's subprocess wrapper, which set up logging)."""
    exit_with_master(master_pid)
    WorkerServer(config, drain_s, master_pid).run(sockets)
