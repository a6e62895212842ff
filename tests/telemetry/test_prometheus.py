"""A real Prometheus scrapes a gateway that served real traffic (policy decisions, tool calls
blocked, redactions, budgets, retries, fallbacks, streams), and every query of every
dashboard panel evaluates without error and returns series; the latency buckets carry
exemplars that name exported traces."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import HELLO, eventually, free_port
from tests.processes import START_TIMEOUT_S, process_timeout, start_group, stop_group
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway, running_gateway
from tests.telemetry.conftest import telemetry_block, traced_config
from tests.telemetry.dashboards import filled, prometheus_queries
from tests.telemetry.receiver import OtlpReceiver

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    process_timeout,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="the prometheus binary is not installed (apt-get install -y prometheus; .ci/run does)",
    ),
]

REPO = Path(__file__).resolve().parents[2]
UNKNOWN_TENANT_KEY = "tg-test-key-gamma"
POLICY_DATA = """
defaults:
  on_tool_violation: reject
  redact: {request: "mask", response: "off", entities: []}
  limits: {max_tokens: 4096, tool_output_max_chars: 16000}
  soft_budget_max_tokens: 1024
data_classes: {}
tenants:
  alpha:
    models: ["*"]
    tools: ["search"]
    on_tool_violation: strip
  beta:
    models: ["*"]
    tools: ["search"]
"""
SEARCH_TOOL: Any = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def governed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("governed")


@pytest.fixture(scope="module")
def governed(
    upstream_sim: RunningSimulator, receiver: OtlpReceiver, governed_dir: Path
) -> Iterator[RunningGateway]:
    """Policy (with redaction and tool rules), budgets and prices on, and a tenant the policy
    does not know (gamma), so that every dashboard has something to show."""
    directory = governed_dir
    policies = directory / "policies"
    policies.mkdir()
    shutil.copy(REPO / "policies" / "authz.rego", policies / "authz.rego")
    (policies / "data.yaml").write_text(POLICY_DATA)
    config = traced_config(
        upstream_sim,
        telemetry_block(receiver.endpoint),
        policy={"dir": str(policies)},
        audit={"path": str(directory / "audit.jsonl"), "fsync": "never"},
        state={"sqlite_path": str(directory / "state.db")},
        # cache_s 0: each turn reads the record the last one settled (the growth panel needs it)
        sessions={"enabled": True, "cache_s": 0, "checkpoints": {"mode": "advise", "every_turns": 2}},
        prices={"sim-model": {"input": 1.0, "cached_input": 0.1, "output": 4.0}},
        models={  # run side by side: every request also goes to a shadow (the Cost dashboard's arms)
            "side-by-side": [
                {"upstream": "local", "model": "sim-model"},
                {"upstream": "backup", "model": "sim-model", "mirror": 100},
            ]
        },
        tenants={
            "alpha": {
                "models": ["*"],
                "budgets": [{"window": "day", "usd": 50}, {"window": "month", "tokens": 10**7}],
            },
            "beta": {"models": ["*"]},
            "gamma": {"models": ["*"]},
        },
        keys=[
            {"tenant": "alpha", "hash": hash_key(TEST_KEY), "label": "tests"},
            {"tenant": "beta", "hash": hash_key(OTHER_TENANT_KEY)},
            {"tenant": "gamma", "hash": hash_key(UNKNOWN_TENANT_KEY)},
        ],
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def audit_log(governed: RunningGateway, governed_dir: Path) -> Path:
    return governed_dir / "audit.jsonl"


def test_a_decided_request_names_its_decision_and_trace_everywhere(
    governed: RunningGateway, receiver: OtlpReceiver, audit_log: Path, request_id: str
) -> None:
    trace_id = os.urandom(16).hex()
    with openai.OpenAI(base_url=governed.base_url, api_key=TEST_KEY, max_retries=0) as client:
        client.chat.completions.create(
            model="chat",
            messages=HELLO,
            extra_headers={
                "x-request-id": request_id,
                "traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01",
            },
        )

    def server() -> list[Any]:
        return [s for s in receiver.received.spans_of(trace_id) if s.kind == "SERVER"]

    assert eventually(lambda: bool(server()), 10)
    attributes = server()[0].attributes
    assert attributes["tollgate.decision.allow"] is True
    assert "decide" in {s.name for s in receiver.received.spans_of(trace_id)}

    def decision() -> dict[str, Any] | None:
        if not audit_log.exists():  # records are written in batches, a moment later
            return None
        for line in audit_log.read_text().splitlines():
            record = json.loads(line)
            if record.get("type") == "decision" and record.get("request_id") == request_id:
                return record
        return None

    assert eventually(lambda: decision() is not None, 10)
    record = decision()
    assert record is not None
    assert record["trace_id"] == trace_id
    assert attributes["tollgate.decision.id"] == record["decision_id"]
    assert attributes["tollgate.policy.revision"] == record["policy_revision"]


def _traffic(gateway: RunningGateway, sim: RunningSimulator) -> None:
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as alpha,
        openai.OpenAI(base_url=gateway.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as beta,
        openai.OpenAI(base_url=gateway.base_url, api_key=UNKNOWN_TENANT_KEY, max_retries=0) as gamma,
    ):
        history: list[Any] = [{"role": "system", "content": "You are terse. " * 100}]
        for turn in range(6):  # a growing session, its prefix cached, told to summarize every 2 turns
            history.append({"role": "user", "content": f"question {turn}"})
            alpha.chat.completions.create(
                model="chat",
                messages=history,
                extra_headers={"x-workflow": "triage", "x-session-id": "triage-session-1"},
            )
            history.append({"role": "assistant", "content": f"answer {turn}"})
        for _ in range(3):
            list(alpha.chat.completions.create(model="chat", messages=HELLO, stream=True))
        alpha.chat.completions.create(  # an email to redact
            model="chat", messages=[{"role": "user", "content": "mail jane.doe@example.org"}]
        )
        alpha.chat.completions.create(  # the model calls a tool the policy does not allow
            model="chat",
            messages=HELLO,
            tools=SEARCH_TOOL,
            extra_body={"x_sim": {"tool_calls": [{"name": "delete_repo", "arguments": {"name": "prod"}}]}},
        )
        sim.faults.set({"status": 503, "message": "overloaded"}, count=1, replica=0)
        alpha.chat.completions.create(model="failover", messages=HELLO)  # a fallback
        sim.faults.set({"status": 503, "message": "overloaded"}, count=1)
        alpha.chat.completions.create(model="pooled", messages=HELLO)  # a retry
        alpha.embeddings.create(model="embed", input="hello")
        for _ in range(3):
            list(alpha.chat.completions.create(model="side-by-side", messages=HELLO, stream=True))
        sim.faults.set({"status": 500, "message": "shadow broke"}, count=1, replica=1)
        alpha.chat.completions.create(model="side-by-side", messages=HELLO)  # its shadow fails, unseen
        with pytest.raises(openai.NotFoundError):
            alpha.chat.completions.create(model="no-such-model", messages=HELLO)
        with pytest.raises(openai.PermissionDeniedError):
            beta.chat.completions.create(  # offers a tool it may not use: the policy denies
                model="chat",
                messages=HELLO,
                tools=[{"type": "function", "function": {"name": "delete_repo", "parameters": {}}}],
            )
        with pytest.raises(openai.PermissionDeniedError):
            gamma.chat.completions.create(model="chat", messages=HELLO)  # unknown to the policy
        beta.chat.completions.create(model="chat", messages=HELLO)


@pytest.fixture(scope="module")
def prometheus(governed: RunningGateway, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert PROMETHEUS is not None
    directory = tmp_path_factory.mktemp("prometheus")
    config = directory / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: tollgate\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{governed.port}']}}]\n"
    )
    port = free_port()
    process = start_group(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--enable-feature=exemplar-storage",
        ]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert eventually(lambda: _ready(url), START_TIMEOUT_S), "prometheus did not start"
        yield url
    finally:
        stop_group(process)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _query(url: str, expr: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=10).json()
    return body


@pytest.fixture(scope="module")
def scraped(prometheus: str, governed: RunningGateway, upstream_sim: RunningSimulator) -> str:
    """Prometheus, once it has scraped the gateway a few times after the traffic."""
    upstream_sim.faults.clear()
    _traffic(governed, upstream_sim)
    done = time.time()

    def scraped_since() -> bool:
        # A few scrapes after the traffic, so that every rate() has two samples of every series
        # (Prometheus makes its first scrape up to 5 s after it starts).
        last = _query(prometheus, 'timestamp(up{job="tollgate"} == 1)')["data"]["result"]
        count = _query(prometheus, 'count_over_time(up{job="tollgate"}[1m])')["data"]["result"]
        return (
            bool(last and count) and float(last[0]["value"][1]) > done + 3 and int(count[0]["value"][1]) >= 4
        )

    assert eventually(scraped_since, 30)
    return prometheus


@pytest.mark.parametrize(("dashboard", "panel", "expr"), prometheus_queries())
def test_every_panel_query_returns_series(scraped: str, dashboard: str, panel: str, expr: str) -> None:
    answer = _query(scraped, filled(expr))
    assert answer["status"] == "success", answer
    assert answer["data"]["result"], f"{dashboard}: {panel!r} returned no series"


def test_latency_buckets_carry_exemplars_of_exported_traces(scraped: str, receiver: OtlpReceiver) -> None:
    now = time.time()
    answer = httpx.get(
        scraped + "/api/v1/query_exemplars",
        params={"query": "tollgate_time_to_first_token_seconds_bucket", "start": now - 300, "end": now},
    ).json()
    assert answer["status"] == "success"
    trace_ids = {e["labels"]["trace_id"] for series in answer["data"] for e in series["exemplars"]}
    assert trace_ids
    assert any(receiver.received.spans_of(trace_id) for trace_id in trace_ids)
