"""A dead collector costs requests nothing: they are all answered while the exporters are
stuck (a collector that accepts and never answers) or refused (nothing listening), and
what could not be exported is counted on /metrics."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, eventually, free_port
from tests.servers import TEST_KEY, running_gateway
from tests.telemetry.conftest import traced_config
from tests.telemetry.test_metrics import _value


@contextmanager
def black_hole() -> Iterator[str]:
    """A TCP server that accepts connections and never answers on them."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


@contextmanager
def refused() -> Iterator[str]:
    yield f"http://127.0.0.1:{free_port()}"


@pytest.mark.slow
@pytest.mark.parametrize("collector", [black_hole, refused], ids=["hangs", "refuses"])
def test_requests_are_answered_and_drops_counted(upstream_sim: RunningSimulator, collector: object) -> None:
    with collector() as endpoint:  # type: ignore[operator]
        telemetry = {
            "traces": {
                "exporter": "otlp",
                "otlp": {"endpoint": endpoint, "timeout_s": 60},
                "sampling_ratio": 1.0,
                "queue_size": 4,
                "batch_size": 2,
                "export_interval_s": 0.05,
            },
            "metrics": {"otlp": {"endpoint": endpoint, "timeout_s": 60, "interval_s": 0.05}},
        }
        with running_gateway(traced_config(upstream_sim, telemetry)) as gateway:
            # An exporter that held up requests would hold them for its 60 s timeout; the client
            # gives up after 20.
            with openai.OpenAI(
                base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0, timeout=20
            ) as client:
                for index in range(30):
                    if index % 2:
                        chunks = list(
                            client.chat.completions.create(model="chat", messages=HELLO, stream=True)
                        )
                        assert chunks[-1].choices[0].finish_reason == "stop"
                    else:
                        answer = client.chat.completions.create(model="chat", messages=HELLO)
                        assert answer.choices[0].message.content
            name = "tollgate_telemetry_dropped_total"
            assert eventually(lambda: _value(gateway.url, name, tollgate_signal="spans") > 0, 10)
            assert eventually(lambda: _value(gateway.url, name, tollgate_signal="metrics") > 0, 10)
            assert _value(gateway.url, "tollgate_request_duration_seconds_count", tollgate_model="chat") == 30
            assert httpx.get(gateway.url + "/readyz").status_code == 200
