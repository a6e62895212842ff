"""The server processes: a worker tunes its garbage collector once it has loaded everything;
`tollgate serve` drains on SIGTERM, and its workers never outlive their master."""

from __future__ import annotations

import gc
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from gateway.serve import GC_YOUNG_THRESHOLD, tune_gc
from simulator import RunningSimulator
from tests.harness import HELLO, free_port, openai_upstream
from tests.processes import STOP_TIMEOUT_S, GatewayProcess, process_timeout, wait_until
from tests.servers import TEST_KEY, gateway_config

AUTH = {"authorization": f"Bearer {TEST_KEY}"}
STARTED = re.compile(r"Started server process \[(\d+)\]")


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_tune_gc_freezes_what_is_loaded_and_raises_the_young_threshold(restored_gc: None) -> None:
    loaded = [[n] for n in range(1000)]  # tracked by the collector
    tune_gc()
    assert gc.get_freeze_count() >= len(loaded)
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD


# `tollgate serve` with two workers, as real processes: SIGTERM drains, SIGKILL of the master
# takes the workers with it.


def _served_config(tmp_path: Path, upstream: RunningSimulator, port: int, drain_s: float) -> Path:
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        server={"host": "127.0.0.1", "port": port, "workers": 2, "drain_s": drain_s},
    )
    path = tmp_path / "tollgate.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude_none=True)))
    return path


def _chat(url: str, **extra: Any) -> httpx.Response:
    body = {"model": "chat", "messages": HELLO, **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)


def _answers(url: str, path: str, status: int) -> bool:
    try:
        return httpx.get(url + path, timeout=5).status_code == status
    except httpx.HTTPError:
        return False


def _refused_call(url: str) -> httpx.Response:
    """The first model call refused by a draining worker. The master passes SIGTERM on to
    its workers one after another, so on a busy machine a call that reaches a worker not
    told yet is still served, as it should be; none may fail in another way."""
    answers: list[httpx.Response] = []

    def refused() -> bool:
        answers.append(_chat(url))
        assert answers[-1].status_code in (200, 503), answers[-1].text
        return answers[-1].status_code == 503

    wait_until(refused, 10, "a model call refused while draining")
    return answers[-1]


def _streamed_text(events: str) -> str:
    text = []
    for line in events.splitlines():
        if line.startswith("data: {"):
            for choice in orjson.loads(line[6:]).get("choices", []):
                text.append(choice["delta"].get("content") or "")
    return "".join(text)


@pytest.mark.slow
@process_timeout
def test_sigterm_drains_in_flight_streams_refuses_new_calls_then_closes_the_port(
    paced_sim: RunningSimulator, tmp_path: Path
) -> None:
    port = free_port()
    gateway = GatewayProcess(_served_config(tmp_path, paced_sim, port, 1.0), port, 2, tmp_path / "gw.log")
    reply = " ".join(f"w{n}" for n in range(80))  # 50 ms a token: a few seconds of stream
    started, streamed = threading.Event(), {}

    def stream() -> None:
        body = {"model": "chat", "messages": HELLO, "stream": True, "x_sim": {"reply": reply}}
        with httpx.stream(
            "POST", gateway.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120
        ) as response:
            chunks = []
            for chunk in response.iter_text():
                chunks.append(chunk)
                started.set()
            streamed["status"], streamed["events"] = response.status_code, "".join(chunks)

    relay = threading.Thread(target=stream, daemon=True)
    try:
        assert _chat(gateway.url).status_code == 200
        relay.start()
        assert started.wait(60), gateway.log.read_text()
        gateway.popen.send_signal(signal.SIGTERM)
        # A fresh connection during the drain is answered at once, not left hanging.
        wait_until(lambda: _answers(gateway.url, "/readyz", 503), 30, "/readyz to say draining")
        refused = _refused_call(gateway.url)
        assert refused.status_code == 503
        assert refused.headers["connection"] == "close"
        assert refused.json()["error"]["code"] == "shutting_down"
        relay.join(timeout=120)
        assert streamed["status"] == 200
        assert streamed["events"].rstrip().endswith("data: [DONE]")
        assert _streamed_text(streamed["events"]) == reply  # the stream in flight ran to its end
        assert gateway.popen.wait(timeout=STOP_TIMEOUT_S) == 0, gateway.log.read_text()
        with pytest.raises(httpx.ConnectError):  # refused, once the workers are gone
            httpx.get(gateway.url + "/healthz", timeout=5)
    finally:
        gateway.kill()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited; only its parent's reaping is left


@pytest.mark.slow
@process_timeout
def test_the_workers_exit_when_their_master_is_killed_and_the_port_can_be_served_again(
    upstream_sim: RunningSimulator, tmp_path: Path
) -> None:
    port = free_port()
    config = _served_config(tmp_path, upstream_sim, port, 0.5)
    gateway = GatewayProcess(config, port, 2, tmp_path / "gw.log")
    try:
        workers: list[int] = []

        def started() -> bool:
            workers[:] = sorted(set(map(int, STARTED.findall(gateway.log.read_text()))))
            return len(workers) == 2

        wait_until(started, 60, "two workers to log their start")
        gateway.popen.send_signal(signal.SIGKILL)
        gateway.popen.wait(timeout=STOP_TIMEOUT_S)
        wait_until(lambda: not any(map(_running, workers)), 60, f"workers {workers} to exit")
        again = GatewayProcess(config, port, 2, tmp_path / "gw-again.log")
        try:
            assert _chat(again.url).status_code == 200
        finally:
            again.stop()
    finally:
        gateway.kill()
