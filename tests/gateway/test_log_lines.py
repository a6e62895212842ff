"""Log lines are written in batches, and none is lost: not the ones a warning follows, not
the ones still held when the server shuts down. The access line's direct way to the handler
writes what the logging module would, and a request id the gateway minted is never altered."""

from __future__ import annotations

import asyncio
import contextvars
import io
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from gateway.logs import BatchedLineHandler, JsonFormatter, flush_logs, log_info
from gateway.redaction.marks import Verbatim
from gateway.redaction.scrub import scrub_text
from gateway.request_ids import request_id_from
from gateway.tracing import CORRELATION, Correlation
from simulator import RunningSimulator
from tests.harness import HELLO, eventually, free_port, openai_upstream
from tests.processes import START_TIMEOUT_S, process_timeout, stop_group
from tests.servers import TEST_KEY, gateway_config

ROOT = Path(__file__).resolve().parents[2]
Served = tuple[str, "subprocess.Popen[bytes]", Path]


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def handler_and_logger() -> Iterator[tuple[BatchedLineHandler, CountingStream, logging.Logger]]:
    stream = CountingStream()
    handler = BatchedLineHandler(stream, max_lines=4, max_delay_s=0.05)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.batched")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler, stream, logger
    finally:
        logger.handlers[:] = []
        logger.propagate = True


def serving_a_request() -> None:
    """Marks the running task as serving a request, as the edge does."""
    CORRELATION.set(Correlation("req-under-test"))


def _messages(stream: io.StringIO) -> list[str]:
    return [orjson.loads(line)["msg"] for line in stream.getvalue().splitlines()]


def test_without_an_event_loop_each_line_is_written_at_once(handler_and_logger) -> None:  # type: ignore[no-untyped-def]
    _, stream, logger = handler_and_logger

    def serve() -> None:
        serving_a_request()
        logger.info("one")
        logger.info("two")

    contextvars.copy_context().run(serve)
    assert _messages(stream) == ["one", "two"]
    assert stream.writes == 2


def test_a_line_written_outside_a_request_is_written_at_once_with_the_batch(handler_and_logger) -> None:  # type: ignore[no-untyped-def]
    _, stream, logger = handler_and_logger

    async def serve() -> None:
        async def request() -> None:
            serving_a_request()
            logger.info("access")

        await asyncio.create_task(request())
        assert stream.writes == 0
        logger.info("Finished server process")  # no request: the loop may not run again
        assert _messages(stream) == ["access", "Finished server process"]

    asyncio.run(serve())


def test_in_an_event_loop_lines_written_together_after_the_delay(handler_and_logger) -> None:  # type: ignore[no-untyped-def]
    _, stream, logger = handler_and_logger

    async def serve() -> None:
        serving_a_request()
        logger.info("one")
        logger.info("two")
        assert stream.writes == 0
        await asyncio.sleep(0.2)
        assert _messages(stream) == ["one", "two"]
        assert stream.writes == 1  # one write for the batch

    asyncio.run(serve())


def test_a_warning_writes_at_once_with_the_lines_before_it(handler_and_logger) -> None:  # type: ignore[no-untyped-def]
    _, stream, logger = handler_and_logger

    async def serve() -> None:
        serving_a_request()
        logger.info("before")
        logger.warning("trouble")
        assert _messages(stream) == ["before", "trouble"]

    asyncio.run(serve())


def test_a_full_batch_is_written_at_once(handler_and_logger) -> None:  # type: ignore[no-untyped-def]
    _, stream, logger = handler_and_logger

    async def serve() -> None:
        serving_a_request()
        for n in range(5):
            logger.info(str(n))
        assert _messages(stream) == ["0", "1", "2", "3"]  # max_lines=4
        await asyncio.sleep(0.2)
        assert _messages(stream) == ["0", "1", "2", "3", "4"]

    asyncio.run(serve())


def test_flush_writes_what_is_held(handler_and_logger) -> None:  # type: ignore[no-untyped-def]
    handler, stream, logger = handler_and_logger
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = [handler]
    try:

        async def serve() -> None:
            serving_a_request()
            logger.info("held")
            assert stream.getvalue() == ""
            flush_logs()
            assert _messages(stream) == ["held"]

        asyncio.run(serve())
    finally:
        root.handlers[:] = saved


def test_a_broken_stream_does_not_fail_the_caller() -> None:
    stream = io.StringIO()
    stream.close()
    handler = BatchedLineHandler(stream)
    handler.setFormatter(JsonFormatter())
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "lost", None, None)
    handler.handle(record)  # no exception


@pytest.fixture
def served(upstream_sim: RunningSimulator, tmp_path: Path) -> Iterator[Served]:
    """`tollgate serve` in its own process, access log on, stderr to a file."""
    port = free_port()
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        server={"host": "127.0.0.1", "port": port, "workers": 1, "access_log": True},
    )
    path = tmp_path / "tollgate.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude_none=True)))
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path)],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        assert eventually(lambda: _up(url), START_TIMEOUT_S), log.read_text()
        yield url, process, log
    finally:
        stop_group(process, signal.SIGKILL)


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _access_ids(log: Path) -> list[str]:
    ids = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            entry = orjson.loads(line)
            if entry.get("logger") == "tollgate.access":
                ids.append(entry["request_id"])
    return ids


def _call(url: str, request_id: str) -> None:
    response = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "chat", "messages": HELLO},
        headers={"authorization": f"Bearer {TEST_KEY}", "x-request-id": request_id},
        timeout=30,
    )
    assert response.status_code == 200


@pytest.mark.slow
@process_timeout
def test_the_server_writes_an_access_line_per_request(
    served: tuple[str, subprocess.Popen[bytes], Path],
) -> None:
    url, _, log = served
    ids = [f"batched-{n}" for n in range(5)]
    for request_id in ids:
        _call(url, request_id)
    assert eventually(lambda: _access_ids(log) == ids, 10), log.read_text()


@pytest.mark.slow
@process_timeout
def test_lines_held_at_shutdown_are_written(served: Served) -> None:
    url, process, log = served
    _call(url, "last-before-shutdown")
    os.killpg(process.pid, signal.SIGTERM)  # at once: the line may still be held in the batch
    # uvicorn shuts down gracefully, then ends by the signal it caught.
    assert process.wait(30) in (0, -signal.SIGTERM)
    assert "last-before-shutdown" in _access_ids(log)


@pytest.mark.parametrize("created", [0.5, 1_795_000_000.123, 1_795_312_345.678, 1_800_000_001.999])
def test_the_timestamp_is_the_records_time_whatever_its_digits(created: float) -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "at a time", None, None)
    record.created = created
    entry = orjson.loads(JsonFormatter().format(record))
    expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(created)))
    assert entry["ts"] == f"{expected}.{int((created - int(created)) * 1000):03d}Z"  # as logging's msecs


@pytest.fixture
def root_handler() -> Iterator[tuple[CountingStream, logging.Logger]]:
    """The root logger as `configure_logging` sets it up, writing to a stream of ours."""
    stream = CountingStream()
    handler = BatchedLineHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logger = logging.getLogger("tests.direct.access")
    try:
        yield stream, logger
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
        logger.handlers[:] = []
        logger.filters[:] = []


ACCESS_FIELDS = {"tenant": "acme", "status": 200, "stream": False, "error": None, "duration_ms": 1.25}


def _entries(stream: io.StringIO) -> list[dict[str, object]]:
    entries = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    for entry in entries:
        entry.pop("ts")
    return entries


def test_log_info_writes_the_line_logger_info_writes(root_handler) -> None:  # type: ignore[no-untyped-def]
    stream, logger = root_handler

    def serve() -> None:
        CORRELATION.set(Correlation("req-same-line"))
        logger.info("request", extra=dict(ACCESS_FIELDS))
        log_info(logger, "request", dict(ACCESS_FIELDS))
        flush_logs()

    contextvars.copy_context().run(serve)
    through_logging, direct = _entries(stream)
    assert direct == through_logging
    assert direct["request_id"] == "req-same-line" and direct["tenant"] == "acme"


def test_log_info_takes_the_logging_modules_way_past_another_handler_or_a_filter(root_handler) -> None:  # type: ignore[no-untyped-def]
    stream, logger = root_handler
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger.handlers[:] = [Keep()]
    log_info(logger, "request", dict(ACCESS_FIELDS))
    assert [record.getMessage() for record in seen] == ["request"]
    logger.handlers[:] = []

    logger.addFilter(lambda record: False)  # a filter that drops every line
    log_info(logger, "request", dict(ACCESS_FIELDS))
    flush_logs()
    assert len(_entries(stream)) == 1  # only the first line, which also propagated to the root


def test_a_minted_request_id_is_logged_as_it_is_and_a_clients_is_scrubbed(root_handler) -> None:  # type: ignore[no-untyped-def]
    stream, logger = root_handler
    minted = request_id_from(None)
    # The same random hex with a run of digits that passes the card check: text of the client's.
    card_like = "req_c9fed51bc05a4969242448027da63f2a"
    assert scrub_text(card_like) != card_like
    spoofed = request_id_from(card_like)
    for request_id in (Verbatim(card_like), minted, spoofed):
        log_info(logger, "request", {"request_id": request_id})
    flush_logs()
    assert [entry["request_id"] for entry in _entries(stream)] == [card_like, minted, scrub_text(card_like)]
