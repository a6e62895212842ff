"""The span queue: full batches go at once, the remainder once per interval; a request whose
spans cannot be encoded is dropped and counted alone; a full queue drops before encoding."""

from __future__ import annotations

import threading
import time

from telemetry.span_queue import SpanQueue


class Finished:
    def __init__(self, data: bytes, fail: bool = False) -> None:
        self.data = data
        self.fail = fail
        self.encoded = False

    def encode(self) -> bytes:
        self.encoded = True
        if self.fail:
            raise ValueError("broken")
        return self.data


class Recording:
    def __init__(self) -> None:
        self.batches: list[list[bytes]] = []
        self.sent = threading.Event()

    def export(self, spans: list[bytes]) -> bool:
        self.batches.append(spans)
        self.sent.set()
        return True

    def shutdown(self) -> None:
        return None


def test_full_batches_go_at_once_and_the_rest_after_the_interval() -> None:
    exporter = Recording()
    queue = SpanQueue(exporter, max_spans=100, batch_spans=10, interval_s=2.0)
    try:
        started = time.monotonic()
        for i in range(7):  # 14 spans: one full batch of 10 (five requests), then 4 left
            queue.put(Finished(bytes([i])), 2)
        assert exporter.sent.wait(1.5)  # well before the interval, however busy the machine
        assert exporter.batches == [[bytes([i]) for i in range(5)]]
        exporter.sent.clear()
        assert exporter.sent.wait(5.0)
        assert time.monotonic() - started >= 1.95  # the remainder waited for the interval
        assert exporter.batches[1] == [bytes([5]), bytes([6])]
    finally:
        queue.shutdown()
    assert queue.dropped == 0


def test_a_request_that_cannot_be_encoded_is_dropped_alone_and_a_full_queue_encodes_nothing() -> None:
    exporter = Recording()
    queue = SpanQueue(exporter, max_spans=6, batch_spans=6, interval_s=30)
    good, bad, refused = Finished(b"a"), Finished(b"b", fail=True), Finished(b"c")
    queue.put(good, 3)
    queue.put(bad, 2)
    queue.put(refused, 3)  # 8 > 6: refused at the door
    queue.shutdown()
    assert exporter.batches == [[b"a"]]
    assert (queue.queue_full, queue.export_failed, queue.dropped) == (3, 2, 5)
    assert not refused.encoded
