"""``Simulator``: the replicas' listeners and lifecycle."""

from __future__ import annotations

import asyncio
import socket
from types import TracebackType
from typing import Self

from aiohttp import web

from simulator.capacity import CapacitySchedule
from simulator.config import SimConfig
from simulator.faults import FaultPlan
from simulator.handlers import ReplicaApp
from simulator.recording import RecordedRequest
from simulator.state import SimState
from simulator.threaded import RunningSimulator

_BACKLOG = 1024
_SHUTDOWN_TIMEOUT_S = 0.5  # in-flight slow streams are cut this long after stop() begins


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=_BACKLOG)


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class Simulator:
    """A real HTTP upstream with ``config.replicas`` replica servers.

    Use ``async with Simulator(cfg) as sim:`` (or ``await start()`` / ``await stop()``), then
    talk to ``sim.urls``. ``sim.requests`` records every request; ``sim.faults`` injects
    server-level faults, including taking a replica's listener down and up.
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        self._state = SimState(self.config)
        self._runners: list[web.AppRunner] = []
        self._servers: list[asyncio.Server | None] = []
        self._ports: list[int] = []
        self._starting: dict[int, asyncio.Task[None]] = {}  # replica -> listener being started by up()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.urls: list[str] = []

    @staticmethod
    def start_in_thread(config: SimConfig | None = None) -> RunningSimulator:
        """Start a simulator on its own event loop in a daemon thread (for sync tests)."""
        return RunningSimulator(Simulator(config))

    @property
    def url(self) -> str:
        """``urls[0]``, e.g. ``http://127.0.0.1:PORT``."""
        return self.urls[0]

    @property
    def ports(self) -> list[int]:
        """The replicas' ports (kept across ``faults.down``/``up``)."""
        return list(self._ports)

    def openai_base_url(self, i: int = 0) -> str:
        """Base URL for an OpenAI client talking to replica ``i``."""
        return f"{self.urls[i]}/v1"

    @property
    def workers_ai_base_url(self) -> str:
        """Append ``/accounts/{id}/ai/...`` to this."""
        return f"{self.urls[0]}/client/v4"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in order (the same list object for the simulator's life)."""
        return self._state.requests

    @property
    def faults(self) -> FaultPlan:
        """Server-level faults; see ``FaultPlan``."""
        return self._state.faults

    @property
    def capacity(self) -> CapacitySchedule:
        """The 429 windows in force; ``capacity.set([...])`` / ``capacity.clear()``."""
        return self._state.capacity

    def clear(self) -> None:
        """Forget the recorded requests (caches and counters are kept)."""
        self._state.requests.clear()

    def replica_stats(self) -> list[dict[str, int]]:
        """Per replica server: ``{requests, prompt_tokens, cached_tokens}`` of inference requests."""
        return [slot.stats.as_dict() for slot in self._state.replicas]

    def workers_ai_stats(self) -> list[dict[str, int]]:
        """The same counters per internal Workers AI instance."""
        return [slot.stats.as_dict() for slot in self._state.workers_ai]

    async def start(self) -> None:
        if self._state.stopping.is_set() or self._loop is not None:
            raise RuntimeError("a simulator can be started only once")
        self._loop = asyncio.get_running_loop()
        config = self.config
        try:
            for index in range(config.replicas):
                runner = web.AppRunner(
                    ReplicaApp(self._state, index).build(),
                    handle_signals=False,
                    access_log=None,
                    handler_cancellation=True,
                    shutdown_timeout=_SHUTDOWN_TIMEOUT_S,
                )
                await runner.setup()
                self._runners.append(runner)
                assert runner.server is not None
                sock = _listen(config.host, config.port + index if config.port else 0)
                self._ports.append(sock.getsockname()[1])
                try:
                    self._servers.append(await self._loop.create_server(runner.server, sock=sock))
                except BaseException:
                    sock.close()
                    raise
                self.urls.append(f"http://{_url_host(config.host)}:{self._ports[-1]}")
        except BaseException:
            await self.stop()
            raise
        self._state.faults.attach(self)

    async def stop(self) -> None:
        """Stop listening, release hanging requests, close connections. Idempotent."""
        if self._loop is None:
            return
        self._state.faults.attach(None)
        self._state.stopping.set()
        if self._starting:  # they close their listener themselves once they see `stopping`
            await asyncio.gather(*self._starting.values(), return_exceptions=True)
        for server in self._servers:
            if server is not None:
                server.close()
        for runner in self._runners:
            await runner.cleanup()
        self._servers.clear()
        self._runners.clear()
        self._loop = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # ReplicaSwitch, used by FaultPlan.down/up from any thread
    def set_replica_down(self, replica: int, down: bool) -> None:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the simulator is not running")
        if not 0 <= replica < len(self._servers):
            raise IndexError(f"no replica {replica}")
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._switch(replica, down)
        else:
            asyncio.run_coroutine_threadsafe(self._switch_async(replica, down), loop).result(timeout=10)

    def down_replicas(self) -> list[int]:
        return [i for i, down in enumerate(self._state.down) if down]

    async def _switch_async(self, replica: int, down: bool) -> None:
        self._switch(replica, down)

    def _switch(self, replica: int, down: bool) -> None:
        state = self._state
        if state.down[replica] == down:
            return
        if replica in self._starting:  # an up() still starting: it checks `down` when it is done
            state.down[replica] = down
            return
        if down:
            server = self._servers[replica]
            if server is not None:
                server.close()  # closes the listening socket now: new connections are refused
            self._servers[replica] = None
            connections = self._runners[replica].server
            busy = state.busy[replica]
            if connections is not None:
                for handler in connections.connections:
                    if handler in busy:
                        handler.close()  # closes once the answer in progress is sent
                    else:
                        handler.force_close()  # idle keep-alive connection
            state.down[replica] = True
            return
        # Listening starts synchronously, so callers can connect as soon as up() returns; the
        # kernel queues connections until the loop starts accepting them.
        sock = _listen(self.config.host, self._ports[replica])
        state.down[replica] = False
        self._starting[replica] = asyncio.get_running_loop().create_task(self._serve(replica, sock))

    async def _serve(self, replica: int, sock: socket.socket) -> None:
        runner_server = self._runners[replica].server
        assert runner_server is not None
        try:
            server = await asyncio.get_running_loop().create_server(runner_server, sock=sock)
        except BaseException:
            sock.close()
            raise
        finally:
            del self._starting[replica]
        if self._state.down[replica] or self._state.stopping.is_set():
            server.close()
        else:
            self._servers[replica] = server
