"""The compose stack as shipped, run as its processes (no Docker engine here): the gateway
with deploy/compose/tollgate.yaml and `serve --first-key`, the simulator, and Redis. A first
key is minted and printed, a request through it is metered in Redis and its decision is in
the Redis decision log. And the container image's built-in config: it starts on nothing but
an upstream URL, and without one it refuses to start, naming the variable."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis
import yaml

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_CONFIG = ROOT / "deploy" / "compose" / "tollgate.yaml"
IMAGE_CONFIG = ROOT / "deploy" / "container" / "tollgate.yaml"
START_S = float(os.environ.get("TOLLGATE_TEST_START_S", "120"))  # a busy 2-core machine is slow
REDIS_URL = "redis://127.0.0.1:6379/0"
KEY_LINE = re.compile(r"^\s+(tg-\S+)\s*$", re.MULTILINE)


class Served:
    """`tollgate serve` in its own process group, stopped whatever happens."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            *args,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise AssertionError(f"the gateway exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the gateway was not ready within {START_S} s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)

    def printed_key(self) -> str:
        [key] = KEY_LINE.findall(self.log.read_text())
        return key


@pytest.fixture(scope="module")
def keyless_sim() -> Iterator[RunningSimulator]:
    """The simulator as compose runs it: no upstream API key."""
    sim = Simulator.start_in_thread(SimConfig())
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def stack_env(tmp_path: Path, keyless_sim: RunningSimulator) -> Iterator[dict[str, str]]:
    prefix = f"tg-compose-{uuid.uuid4().hex[:8]}"
    policies = shutil.copytree(ROOT / "policies", tmp_path / "policies")
    env = {
        "SIMULATOR_URL": keyless_sim.openai_base_url(0),
        "REDIS_URL": REDIS_URL,
        "TOLLGATE_REDIS_PREFIX": prefix,
        "TOLLGATE_AUDIT_STREAM": f"{prefix}:audit",
        "TOLLGATE_POLICY_DIR": str(policies),
        "TOLLGATE_KEYS_FILE": str(tmp_path / "data" / "keys.yaml"),
        "OTEL_COLLECTOR_URL": f"http://127.0.0.1:{free_port()}",  # no collector: spans are dropped, counted
    }
    yield env
    client = redis.Redis.from_url(REDIS_URL)
    try:
        stale = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if stale:
            client.delete(*stale)
    finally:
        client.close()


def test_compose_runs_the_gateway_with_its_config_a_first_key_and_persistent_redis() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    gateway = compose["services"]["gateway"]
    assert "--first-key" in gateway["command"]
    assert "./deploy/compose/tollgate.yaml:/etc/tollgate/tollgate.yaml:ro" in gateway["volumes"]
    assert any(volume.endswith(":/data") for volume in gateway["volumes"])
    assert "appendonly" in " ".join(compose["services"]["redis"]["command"])


def test_the_compose_config_serves_meters_in_redis_and_logs_decisions_there(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    served = Served(
        ["--config", str(COMPOSE_CONFIG), "--first-key", "--workers", "2"], stack_env, tmp_path / "gw.log"
    )
    try:
        served.wait_ready()
        key = served.printed_key()
        assert key not in Path(stack_env["TOLLGATE_KEYS_FILE"]).read_text()
        with openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="kimi-k2.6", messages=[{"role": "user", "content": "Hello"}]
            )
        assert raw.parse().choices[0].message.content
        request_id = raw.headers["x-request-id"]
    finally:
        served.stop()
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        prefix = stack_env["TOLLGATE_REDIS_PREFIX"]
        assert list(client.scan_iter(match=f"{prefix}:{{demo}}*")), (
            "nothing of tenant demo was metered in Redis"
        )
        records = client.xrange(stack_env["TOLLGATE_AUDIT_STREAM"])
        assert any(request_id in str(fields) for _, fields in records), "the decision was not logged in Redis"
    finally:
        client.close()


def test_the_image_config_starts_on_an_upstream_url_alone(
    keyless_sim: RunningSimulator, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    env = {
        "TOLLGATE_UPSTREAM_URL": keyless_sim.openai_base_url(0),
        "TOLLGATE_DATA_DIR": str(data),
        "TOLLGATE_POLICY_DIR": str(ROOT / "policies"),  # the image's /app/policies
    }
    served = Served(
        ["--config", str(IMAGE_CONFIG), "--first-key", "--workers", "1"], env, tmp_path / "gw.log"
    )
    try:
        served.wait_ready()
        key = served.printed_key()
        with openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0) as client:
            reply = client.chat.completions.create(
                model="kimi-k2.6", messages=[{"role": "user", "content": "Hi"}]
            )
        assert reply.choices[0].message.content
    finally:
        served.stop()
    written = {path.name for path in data.iterdir()}
    assert {"keys.yaml", "tollgate-audit.jsonl", "tollgate-state.db"} <= written  # all of it in /data


def test_the_image_config_without_an_upstream_refuses_to_start_and_says_why(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TOLLGATE_UPSTREAM_URL"}
    env["TOLLGATE_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(IMAGE_CONFIG), "--first-key"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "TOLLGATE_UPSTREAM_URL is not set" in result.stderr
    assert not (tmp_path / "keys.yaml").exists()
