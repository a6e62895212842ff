"""The simulator outside an event loop: the CLI in a subprocess, and the thread helper."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import simulator
from simulator import SimConfig, Simulator

REPO = Path(simulator.__file__).resolve().parent.parent
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def _free_port_pair() -> int:
    """A port p such that p and p + 1 were free a moment ago."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free port pair")


def test_cli_serves_until_sigterm() -> None:
    port = _free_port_pair()
    env = {**os.environ, "TOLLGATE_SIM_API_KEY": "k3y", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--port", str(port), "--replicas", "2", "--block-tokens", "8"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines[0].endswith(f"http://127.0.0.1:{port}")
        assert lines[1].endswith(f"http://127.0.0.1:{port + 1}")
        with httpx.Client(timeout=5) as client:
            for url in (f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"):
                assert client.get(url + "/health").json() == {"status": "ok"}
                assert client.post(url + "/v1/chat/completions", json=BODY).status_code == 401
                authorized = client.post(
                    url + "/v1/chat/completions", json=BODY, headers={"Authorization": "Bearer k3y"}
                )
                assert authorized.status_code == 200
            stats = client.get(f"http://127.0.0.1:{port}/_sim/stats").json()
            assert [r["requests"] for r in stats["replicas"]] == [2, 2]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        simulator.main(["--replicas", "0"])
    assert exit_info.value.code == 2
    assert "replicas" in capsys.readouterr().err


def test_thread_helper_for_sync_tests() -> None:
    with Simulator.start_in_thread(SimConfig(replicas=2)) as running:
        assert len(running.urls) == 2 and running.url == running.urls[0]
        assert running.openai_base_url(1) == running.urls[1] + "/v1"
        with httpx.Client(timeout=5) as client:
            reply = client.post(running.openai_base_url() + "/chat/completions", json=BODY).json()
            assert reply["choices"][0]["message"]["content"].startswith("tok0")
            running.faults.set({"status": 429, "code": 3040, "retry_after": 1}, count=1)
            limited = client.post(running.url + "/v1/chat/completions", json=BODY)
            assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
            running.faults.down(1)
            with pytest.raises(httpx.ConnectError):
                client.post(running.urls[1] + "/v1/chat/completions", json=BODY)
            running.faults.up(1)
            assert client.post(running.urls[1] + "/v1/chat/completions", json=BODY).status_code == 200
        assert [r.status for r in running.requests] == [200, 429, 200]
        assert running.replica_stats()[1]["requests"] == 1
    running.stop()  # idempotent


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--profile", "tgi"], "unknown profile"),
        (["--replicas", "3", "--profile", "vllm,sglang"], "one per replica"),
        (["--capacity", "20-10"], "bad capacity window"),
        (["--capacity", "1-2:404"], "bad capacity window"),
    ],
)
def test_cli_rejects_bad_profiles_and_capacity(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        simulator.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
