"""Running a ``Simulator`` on its own event loop in a daemon thread, for synchronous tests."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Self

from simulator.capacity import CapacitySchedule
from simulator.faults import FaultPlan
from simulator.recording import RecordedRequest

if TYPE_CHECKING:
    from simulator.server import Simulator

_TIMEOUT_S = 30.0


class RunningSimulator:
    """A started simulator in a background thread; ``stop()`` (or ``with``) ends it.

    ``requests`` and the stats are the live objects of the simulator: read them after your
    requests completed. ``faults`` may be used from the calling thread.
    """

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._errors: list[BaseException] = []  # filled by the thread if start() fails
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="tollgate-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(_TIMEOUT_S):
            raise TimeoutError("simulator did not start")
        if self._errors:
            self._thread.join(_TIMEOUT_S)
            raise self._errors[0]

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self.simulator.start())
            except BaseException as exc:
                self._errors.append(exc)
                return
            finally:
                self._ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    @property
    def urls(self) -> list[str]:
        return self.simulator.urls

    @property
    def url(self) -> str:
        return self.simulator.url

    def openai_base_url(self, i: int = 0) -> str:
        return self.simulator.openai_base_url(i)

    @property
    def workers_ai_base_url(self) -> str:
        return self.simulator.workers_ai_base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.simulator.requests

    @property
    def faults(self) -> FaultPlan:
        return self.simulator.faults

    @property
    def capacity(self) -> CapacitySchedule:
        return self.simulator.capacity

    def clear(self) -> None:
        self.simulator.clear()

    def replica_stats(self) -> list[dict[str, int]]:
        return self.simulator.replica_stats()

    def workers_ai_stats(self) -> list[dict[str, int]]:
        return self.simulator.workers_ai_stats()

    def stop(self) -> None:
        """Stop the simulator and its thread. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        asyncio.run_coroutine_threadsafe(self.simulator.stop(), self._loop).result(_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_TIMEOUT_S)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
