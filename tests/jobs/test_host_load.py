"""The host load file: each gateway process publishes its synchronous calls in flight, every
process's pull gate reads the others'. Real files, real processes (a slot belongs to a
process: its POSIX lock is what says it is alive)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.jobs.host_load import HostLoad
from gateway.jobs.pull_gate import PullGate
from tests.harness import eventually

# A gateway process's part in the file: it publishes what it reads on stdin, a line each: a
# count of calls in flight, or "pause S" (an upstream throttled: its pull gate pauses S seconds).
PUBLISHER = """
import sys
from gateway.jobs.host_load import HostLoad
from gateway.jobs.pull_gate import PullGate

class Load:
    in_flight = 0
    listener = None
    async def idle(self): return None
    def watch(self, listener): self.listener = listener

load = Load()
host = HostLoad(sys.argv[1])
host.attach(load, publish=True)
gate = PullGate(limit=1, pause_s=0.0)
gate.attach(host, host)
print("ready", flush=True)
for line in sys.stdin:
    if line.startswith("pause "):
        gate = PullGate(limit=1, pause_s=float(line.split()[1]))
        gate.attach(host, host)
        gate.throttled()
    else:
        load.in_flight = int(line)
        load.listener(load.in_flight)
    print("published", flush=True)
"""


class Publisher:
    def __init__(self, path: Path) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", PUBLISHER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._expect("ready")

    def publish(self, in_flight: int | str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(f"{in_flight}\n")
        self.popen.stdin.flush()
        self._expect("published")

    def _expect(self, word: str) -> None:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()  # bounded by the test's timeout; EOF if it died
        assert line.strip() == word, f"the publisher said {line!r}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        self.popen.wait(timeout=10)
        for pipe in (self.popen.stdin, self.popen.stdout):
            if pipe is not None:
                pipe.close()


class LocalLoad:
    """This process's synchronous calls, as the HTTP edge reports them."""

    def __init__(self, in_flight: int = 0) -> None:
        self.in_flight = in_flight
        self.listeners: list[Callable[[int], None]] = []

    async def idle(self) -> None:
        while self.in_flight:
            await asyncio.sleep(0.001)

    def watch(self, listener: Callable[[int], None]) -> None:
        self.listeners.append(listener)


@pytest.fixture
def publishers(tmp_path: Path) -> Iterator[Callable[[], Publisher]]:
    started: list[Publisher] = []

    def start() -> Publisher:
        started.append(Publisher(tmp_path / "jobs.db.load"))
        return started[-1]

    try:
        yield start
    finally:
        for publisher in started:
            publisher.stop(signal.SIGKILL)


@pytest.mark.timeout(60)
def test_a_worker_sees_every_gateway_processs_calls_and_only_live_ones(
    tmp_path: Path, publishers: Callable[[], Publisher]
) -> None:
    first, second = publishers(), publishers()
    reader = HostLoad(str(tmp_path / "jobs.db.load"), poll_s=0)
    try:
        reader.attach(LocalLoad(), publish=False)
        assert reader.in_flight == 0
        first.publish(2)
        second.publish(3)
        assert reader.in_flight == 5
        second.publish(0)
        assert reader.in_flight == 2
        first.stop(signal.SIGKILL)  # killed with calls in flight: its last count is not counted
        assert reader.in_flight == 0
        third = publishers()  # takes over the dead process's slot
        third.publish(1)
        assert reader.in_flight == 1
    finally:
        reader.close()


@pytest.mark.timeout(60)
def test_a_process_counts_its_own_calls_once(tmp_path: Path, publishers: Callable[[], Publisher]) -> None:
    local = LocalLoad()
    host = HostLoad(str(tmp_path / "jobs.db.load"), poll_s=0)
    try:
        host.attach(local, publish=True)
        local.in_flight = 2
        for listener in local.listeners:
            listener(2)
        assert host.in_flight == 2 and host.others() == 0
        other = publishers()
        other.publish(1)
        assert host.in_flight == 3 and host.others() == 1
    finally:
        host.close()


@pytest.mark.timeout(60)
async def test_the_pull_gate_closes_while_another_gateway_process_has_calls_in_flight(
    tmp_path: Path, publishers: Callable[[], Publisher]
) -> None:
    gateway = publishers()
    host = HostLoad(str(tmp_path / "jobs.db.load"), poll_s=0.001)
    gate = PullGate(limit=1, pause_s=0.0)
    try:
        host.attach(LocalLoad(), publish=False)
        gate.attach(host)
        assert gate.allows()
        gateway.publish(1)
        assert eventually(lambda: not gate.allows())
        step = asyncio.ensure_future(gate.step())  # a running job's next step waits...
        await asyncio.sleep(0.05)
        assert not step.done()
        gateway.publish(0)  # ...until the gateway's call has ended
        await asyncio.wait_for(step, timeout=5)
        assert gate.allows()
    finally:
        host.close()


@pytest.mark.timeout(60)
def test_an_upstream_throttling_seen_by_one_process_pauses_pulling_in_every_process(
    tmp_path: Path, publishers: Callable[[], Publisher]
) -> None:
    gateway = publishers()
    host = HostLoad(str(tmp_path / "jobs.db.load"), poll_s=0)
    gate = PullGate(limit=1, pause_s=0.0)
    try:
        host.attach(LocalLoad(), publish=True)
        gate.attach(host, host)
        assert gate.allows() and gate.throttled_for() == 0
        gateway.publish("pause 30")  # a 429 seen by the gateway's synchronous call
        assert not gate.allows()
        assert 25 < gate.throttled_for() <= 30
        gateway.stop(signal.SIGKILL)  # a dead process's pause is not counted either
        assert gate.allows() and gate.throttled_for() == 0
    finally:
        host.close()
