"""`tollgate dev` as a new user runs it: the gateway in front of the simulator's Kimi profile, and
the README's first request, a forced tool call and a JSON-schema answer through the official SDK."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jsonschema
import openai
import yaml

import simulator

REPO = Path(simulator.__file__).resolve().parent.parent
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _dev_config(tmp_path: Path) -> Path:
    """The shipped config as it is (its port, its simulator URL), but for paths and one worker:
    `--port` and `--sim-port` must be what moves the gateway and the simulator."""
    config = yaml.safe_load((REPO / "tollgate.yaml").read_text())
    config["server"] = {**config["server"], "workers": 1}
    assert "${TOLLGATE_SIM_PORT" in config["upstreams"]["local"]["base_url"]
    config["policy"]["dir"] = str(REPO / "policies")
    config["audit"]["path"] = str(tmp_path / "audit.jsonl")
    config["state"]["sqlite_path"] = str(tmp_path / "state.db")
    path = tmp_path / "tollgate.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _wait_ready(url: str, proc: subprocess.Popen[str], seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "tollgate dev exited"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"tollgate dev did not become ready at {url}")


def test_dev_serves_the_kimi_contract_to_the_official_sdk(tmp_path: Path) -> None:
    port, sim_port = _free_port(), _free_port()
    config = _dev_config(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from gateway.cli import main; sys.exit(main())",
            "dev",
            "--config",
            str(config),
            "--port",
            str(port),
            "--sim-port",
            str(sim_port),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        ready = f"Tollgate is ready: http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 30
        while not any(ready in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [line for line in lines if "Tollgate is ready" in line] == [
            f"{ready}  (upstream: the simulator on port {sim_port}, profile kimi; Ctrl-C stops both)\n"
        ]
        keys = [match.group(1) for line in lines if (match := re.search(r"\b(tg-\S+)", line))]
        assert len(keys) == 1
        key = keys[0]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        first = client.chat.completions.create(
            model="kimi-k2.6", messages=[{"role": "user", "content": "Hello"}]
        )
        assert first.choices[0].message.content
        assert first.choices[0].message.model_dump().get("reasoning")  # the Kimi profile thinks

        forced = client.chat.completions.create(
            model="kimi-k2.6",
            messages=[{"role": "user", "content": "Hello"}],
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
        calls = forced.choices[0].message.tool_calls or []
        assert forced.choices[0].finish_reason == "tool_calls"
        assert [c.function.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]
        jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER["function"]["parameters"])  # type: ignore[union-attr,index]

        answer = client.chat.completions.create(
            model="kimi-k2.6",
            messages=[{"role": "user", "content": "Which city?"}],
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}},
        )
        jsonschema.validate(json.loads(answer.choices[0].message.content or ""), SCHEMA)
        client.close()

        proc.send_signal(signal.SIGTERM)  # to `tollgate dev` alone, as a terminal's Ctrl-C or kill would
        assert proc.wait(timeout=60) == -signal.SIGTERM  # after the simulator has stopped:
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", sim_port)) != 0, "the simulator outlived tollgate dev"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
