"""`tollgate config check`, `tollgate keys create`, and `tollgate serve` as a real process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from gateway.app import keyring_from, tenants_from
from gateway.cli import main
from gateway.config import METRICS_DIR_ENV, load_config
from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import HELLO, free_port, recorded
from tests.processes import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    http_ready,
    process_timeout,
    start_group,
    stop_group,
    wait_until,
)
from tests.servers import REQUEST_ID_KEY, UPSTREAM_KEY

CONFIG = """\
server:
  host: 127.0.0.1
  access_log: false
  request_id_key: {request_id_key}
upstreams:
  local:
    kind: openai_compat
    base_url: {base_url}
    api_key: {api_key}
models:
  chat:
    - {{upstream: local, model: sim-model}}
tenants:
  alpha: {{}}
  beta: {{models: [chat]}}
keys_file: keys.yaml
"""


def _config(tmp_path: Path, base_url: str = "http://127.0.0.1:8081/v1") -> Path:
    path = tmp_path / "tollgate.yaml"
    path.write_text(
        CONFIG.format(base_url=base_url, api_key=UPSTREAM_KEY, request_id_key=REQUEST_ID_KEY),
        encoding="utf-8",
    )
    return path


def _create_key(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["keys", "create", *args]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1  # the key, and nothing else, on stdout
    return lines[0]


def test_config_check_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path)
    assert main(["config", "check", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok (1 upstreams, 1 model aliases, 2 tenants, 0 keys)\n"


def test_config_check_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, base_url="127.0.0.1:8081/v1")
    assert main(["config", "check", str(path)]) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"tollgate: {path}: invalid configuration")
    assert "upstreams.local.base_url" in captured.err


def test_config_check_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(tmp_path / "nope.yaml")]) != 0
    assert "file not found" in capsys.readouterr().err


def test_keys_create_appends_only_the_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = _config(tmp_path)
    keys_file = tmp_path / "keys.yaml"
    first = _create_key(capsys, "--tenant", "alpha", "--append", str(keys_file))
    second = _create_key(capsys, "--tenant", "beta", "--label", "ci", "--append", str(keys_file))
    assert first.startswith("tg-")
    assert first != second
    stored = keys_file.read_text(encoding="utf-8")
    assert first not in stored
    assert second not in stored
    assert hash_key(first) in stored
    assert hash_key(second) in stored
    assert keys_file.stat().st_mode & 0o777 == 0o600
    config = load_config(config_path)
    assert [(k.tenant, k.label) for k in config.keys] == [("alpha", ""), ("beta", "ci")]
    ring = keyring_from(config, tenants_from(config))
    alpha, beta = ring.authenticate(first), ring.authenticate(second)
    assert alpha is not None
    assert alpha.tenant.name == "alpha"
    assert beta is not None
    assert beta.tenant.name == "beta"


def test_keys_create_without_append_shows_the_entry_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "--tenant", "alpha"]) == 0
    captured = capsys.readouterr()
    key = captured.out.strip()
    assert hash_key(key) in captured.err
    assert key not in captured.err


def test_keys_create_checks_the_tenant_against_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys_file = tmp_path / "keys.yaml"
    args = [
        "keys",
        "create",
        "--tenant",
        "gamma",
        "--config",
        str(_config(tmp_path)),
        "--append",
        str(keys_file),
    ]
    assert main(args) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "'gamma' is not defined" in captured.err
    assert not keys_file.exists()


@pytest.mark.slow
@process_timeout
@pytest.mark.parametrize("workers", [2, 1])
def test_serve_runs_workers_and_stops_cleanly_on_sigterm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], upstream: RunningSimulator, workers: int
) -> None:
    config_path = _config(tmp_path, base_url=upstream.openai_base_url(0))
    key = _create_key(capsys, "--tenant", "alpha", "--append", str(tmp_path / "keys.yaml"))
    port = free_port()
    log = tmp_path / "serve.log"
    temp = tmp_path / "temp"  # where the workers' metrics directory is made, and removed at the end
    temp.mkdir()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--config",
                str(config_path),
                "--port",
                str(port),
                "--workers",
                str(workers),
            ],
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=_serve_env(temp),
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        with openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0) as oai:
            response = oai.chat.completions.create(
                model="chat", messages=HELLO, extra_body={"x_sim": {"reply": "from a worker"}}
            )
            assert response.choices[0].message.content == "from a worker"
            stream = oai.chat.completions.create(
                model="chat",
                messages=HELLO,
                stream=True,
                extra_headers={"x-request-id": "serve-stream-1"},
                extra_body={"x_sim": {"reply": "streamed by a worker"}},
            )
            assert (
                "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                == "streamed by a worker"
            )
        [attempt] = recorded(upstream, "serve-stream-1")
        assert attempt.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert [path.name[: len("tollgate-metrics-")] for path in temp.iterdir()] == ["tollgate-metrics-"]
        process.send_signal(signal.SIGTERM)
        # One worker serves in the process and ends it by the signal, after a clean shutdown; many
        # are stopped by a supervisor that exits 0.
        expected = 0 if workers > 1 else -signal.SIGTERM
        assert process.wait(timeout=STOP_TIMEOUT_S) == expected, log.read_text()
        output = log.read_text()
        started = re.findall(r"Started server process \[(\d+)\]", output)
        assert len(set(started)) == workers, output  # each worker shut down in order
        assert sorted(re.findall(r"Finished server process \[(\d+)\]", output)) == sorted(started)
        assert list(temp.iterdir()) == []
    finally:
        stop_group(process, signal.SIGKILL)  # the workers too, should the master have left any


def _serve_env(temp: Path) -> dict[str, str]:
    """A served gateway's environment: this checkout first on its path, and its workers'
    metrics directory made (and to be removed) in `temp`."""
    env = {name: value for name, value in os.environ.items() if name != METRICS_DIR_ENV}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), TMPDIR=str(temp))
    return env


def _unshare_pid() -> list[str] | None:
    """The command prefix that runs a process as PID 1 of a new PID namespace, if this machine
    lets the tests make one (root, or user namespaces); else None."""
    as_root = ["unshare", "--fork", "--pid"]
    for prefix in (as_root, ["unshare", "--user", "--map-root-user", "--fork", "--pid"]):
        try:
            probe = subprocess.run(
                [*prefix, sys.executable, "-c", "import os; print(os.getpid())"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if probe.returncode == 0 and probe.stdout.strip() == "1":
            return prefix
    return None


@pytest.mark.slow
@process_timeout
def test_serve_as_a_containers_init_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    # A container runs `tollgate serve` as PID 1 (the image has no init), and the kernel does
    # not take a signal's default action on PID 1: a single worker must still exit 0, its
    # metrics directory removed, rather than trip over the SIGTERM it raises again when done.
    prefix = _unshare_pid()
    if prefix is None:
        pytest.skip("no PID namespace can be made here (unshare)")
    config_path = _config(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    temp = tmp_path / "temp"
    temp.mkdir()
    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config_path)]
    with log.open("wb") as sink:
        process = start_group(
            [*prefix, *command, "--port", str(port), "--workers", "1"], sink, tmp_path, _serve_env(temp)
        )
    try:
        ready = http_ready(f"http://127.0.0.1:{port}/healthz", process, log)
        wait_until(ready, START_TIMEOUT_S, f"the gateway on port {port} (log: {log})")
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        assert len(children) == 1  # unshare's one child: the gateway, PID 1 in its namespace
        os.kill(int(children[0]), signal.SIGTERM)
        assert process.wait(timeout=STOP_TIMEOUT_S) == 0, log.read_text()
        output = log.read_text()
        assert "Finished server process [1]" in output
        assert "Traceback" not in output
        assert list(temp.iterdir()) == []
    finally:
        stop_group(process, signal.SIGKILL)
