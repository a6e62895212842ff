"""Helpers shared by the gateway and adapter tests (plain functions, not fixtures)."""

from __future__ import annotations

import io
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from gateway.logs import JsonFormatter
from gateway.redaction.scrub import Scrubber
from gateway.request_ids import UpstreamIds
from simulator import RecordedRequest, RunningSimulator
from tests.servers import REQUEST_ID_KEY, UPSTREAM_KEY

HELLO = [{"role": "user", "content": "hello"}]


def installed_tool(name: str, install: str) -> str:
    """The path of a command-line tool the tests run. Missing: a skip on a developer's machine,
    a failure in CI, whose .ci/run installs it (`install` says how)."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing on the CI machine ({install})")
        pytest.skip(f"{name} is not installed ({install})")
    return found


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_before_day_end(now: datetime, margin_s: float) -> float:
    """Seconds to wait so that the next `margin_s` seconds fall in one UTC day: 0 unless the
    day ends sooner, else until just past its midnight."""
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    left = (midnight - now).total_seconds()
    return 0.0 if left >= margin_s else left + 1.0


def openai_upstream(base_url: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "openai_compat", "base_url": base_url, "api_key": UPSTREAM_KEY, **extra}


def chat_body(model: str = "chat", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": HELLO, **extra}


def upstream_id(request_id: str) -> str:
    """The id a test gateway (keyed with REQUEST_ID_KEY) sends upstream for `request_id`."""
    return UpstreamIds(REQUEST_ID_KEY.encode())(request_id)


def recorded(sim: RunningSimulator, request_id: str) -> list[RecordedRequest]:
    """What the simulator received for one gateway request (every attempt), in order."""
    sent = upstream_id(request_id)
    return [r for r in list(sim.requests) if r.headers.get("x-request-id") == sent]


def eventually(predicate: Callable[[], bool], seconds: float = 15.0) -> bool:
    """Whether `predicate` turns true within `seconds`, polled; generous because the machine a
    suite runs on may be busy, and free: it returns as soon as the predicate holds."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The `error` object of an OpenAI-format error response, after checking its shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"]
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


@contextmanager
def captured_logs(scrubber: Scrubber | None = None) -> Iterator[io.StringIO]:
    """Every INFO-or-worse line this process logs meanwhile, formatted as the server formats it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(scrubber))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
