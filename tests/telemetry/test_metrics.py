"""Metrics of real requests: the /metrics page (Prometheus text and OpenMetrics with exemplars),
the OTLP push with the GenAI conventions' names, bounded labels, and every worker of a
multi-process server on one page."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from simulator import RunningSimulator
from tests.harness import HELLO, eventually, free_port, openai_upstream
from tests.servers import TEST_KEY, RunningGateway, gateway_config
from tests.telemetry.receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]


def _samples(url: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """{sorted labels: value} of one sample name on the /metrics page."""
    found = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _value(url: str, name: str, **labels: str) -> float:
    return sum(
        value for key, value in _samples(url, name).items() if all((k, v) in key for k, v in labels.items())
    )


def test_the_page_counts_requests_by_workflow_model_and_outcome(
    traced: RunningGateway, traced_client: openai.OpenAI, upstream: RunningSimulator
) -> None:
    url = traced.url
    name = "tollgate_request_duration_seconds_count"
    before = _value(url, name, tollgate_workflow="triage", tollgate_model="chat", error_type="")
    for _ in range(3):
        traced_client.chat.completions.create(
            model="chat", messages=HELLO, extra_headers={"x-workflow": "triage"}
        )
    assert _value(url, name, tollgate_workflow="triage", tollgate_model="chat", error_type="") == before + 3
    ttft = "tollgate_time_to_first_token_seconds_count"
    assert _value(url, ttft, tollgate_workflow="triage", gen_ai_request_stream="false") >= 3

    with pytest.raises(openai.NotFoundError):
        traced_client.chat.completions.create(
            model="nope", messages=HELLO, extra_headers={"x-workflow": "triage"}
        )
    assert _value(url, name, tollgate_workflow="triage", error_type="model_not_found") >= 1
    # A model name the config does not know is the client's text: folded, never a label value.
    models = {dict(labels).get("tollgate_model") for labels in _samples(url, name)}
    assert "nope" not in models
    assert _value(url, name, tollgate_model="other", error_type="model_not_found") >= 1


def test_cached_and_input_tokens_give_the_hit_ratio_by_family(
    traced: RunningGateway, traced_client: openai.OpenAI, upstream: RunningSimulator
) -> None:
    url = traced.url
    long_prompt = [{"role": "system", "content": "You are terse. " * 200}, {"role": "user", "content": "hi"}]
    for _ in range(3):  # the same opening: the simulator's prefix cache serves the later ones
        traced_client.chat.completions.create(model="chat", messages=long_prompt)  # type: ignore[arg-type]
    name = "tollgate_prompt_cache_tokens_total"
    cached = _value(url, name, tollgate_upstream="local", gen_ai_token_type="cache_read")
    prompt = _value(url, name, tollgate_upstream="local", gen_ai_token_type="input")
    assert 0 < cached < prompt
    families = {dict(k)["tollgate_prompt_family"] for k in _samples(url, name)}
    assert families and all(re.fullmatch(r"pf\d\d|none", f) for f in families)


def test_retries_and_fallbacks_are_counted_by_outcome(
    traced: RunningGateway, traced_client: openai.OpenAI, upstream: RunningSimulator
) -> None:
    url = traced.url
    name = "tollgate_upstream_attempts_total"
    fallbacks = _value(url, name, tollgate_attempt_kind="fallback", tollgate_outcome="success")
    failed = _value(url, name, tollgate_upstream="local", tollgate_outcome="upstream_unavailable")
    upstream.faults.set({"status": 503, "message": "overloaded"}, count=1, replica=0)
    traced_client.chat.completions.create(model="failover", messages=HELLO)
    assert _value(url, name, tollgate_attempt_kind="fallback", tollgate_outcome="success") == fallbacks + 1
    assert _value(url, name, tollgate_upstream="local", tollgate_outcome="upstream_unavailable") == failed + 1
    assert {
        dict(k)["tollgate_replica"] for k in _samples(url, name) if ("tollgate_upstream", "local") in k
    } == {"0"}


def test_session_growth_is_by_turn_bucket(traced: RunningGateway, traced_client: openai.OpenAI) -> None:
    history: list[dict[str, str]] = [{"role": "user", "content": "one"}]
    for turn in range(3):
        traced_client.chat.completions.create(model="chat", messages=history)  # type: ignore[arg-type]
        history += [{"role": "assistant", "content": f"answer {turn}"}, {"role": "user", "content": "more"}]
    turns = {dict(k)["tollgate_turn"] for k in _samples(traced.url, "tollgate_session_input_tokens_count")}
    assert {"1", "2", "3-4"} <= turns


def test_openmetrics_carries_exemplars_that_name_sampled_traces(
    traced: RunningGateway, traced_client: openai.OpenAI, receiver: OtlpReceiver
) -> None:
    traced_client.chat.completions.create(model="chat", messages=HELLO)
    page = httpx.get(
        traced.url + "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert page.headers["content-type"].startswith("application/openmetrics-text")
    exemplars = re.findall(
        r'tollgate_time_to_first_token_seconds_bucket\{[^}]*\} \d+\.\d+ # \{trace_id="([0-9a-f]{32})"\}',
        page.text,
    )
    assert exemplars
    assert eventually(lambda: bool(receiver.received.spans_of(exemplars[-1])), 10)


def test_the_otlp_push_uses_the_genai_conventions(
    traced: RunningGateway, traced_client: openai.OpenAI, receiver: OtlpReceiver
) -> None:
    traced_client.chat.completions.create(model="chat", messages=HELLO)

    def pushed() -> bool:
        return {
            "gen_ai.client.operation.duration",
            "gen_ai.client.token.usage",
        } <= receiver.received.metric_names()

    assert eventually(pushed, 10)
    with receiver.received.lock:
        found = [(r, m) for r, name, m in receiver.received.metrics if name == "gen_ai.client.token.usage"]
    resource, metric = found[-1]
    assert resource["service.name"] == "tollgate-test"
    assert resource["service.instance.id"].endswith(f"-{os.getpid()}")
    assert metric.unit == "{token}"
    point = metric.histogram.data_points[0]
    attributes = {kv.key: kv.value.string_value for kv in point.attributes}
    assert {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.token.type",
    } <= set(attributes)
    assert list(point.explicit_bounds)[:4] == [1, 4, 16, 64]
    assert metric.histogram.aggregation_temporality == 2  # cumulative


# Every worker on one page


@pytest.fixture
def two_workers(upstream_sim: RunningSimulator, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`tollgate serve` with two worker processes, as in production; (URL, metrics directory)."""
    port = free_port()
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        server={"host": "127.0.0.1", "port": port, "workers": 2},
        telemetry={"metrics": {"snapshot_interval_s": 0.2}},
    )
    path = tmp_path / "tollgate.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude_none=True)))
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "999999999.json").write_text('{"metrics": {"tollgate.request.duration": [[["x"], 1]]}}')
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path)],
        cwd=ROOT,
        env={**os.environ, "TOLLGATE_METRICS_DIR": str(metrics_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert eventually(lambda: _up(url), 30), "the server did not start"
        yield url, metrics_dir
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _served_by_file(metrics_dir: Path) -> dict[str, int]:
    """Requests each worker counted in its own snapshot file."""
    served = {}
    for path in metrics_dir.glob("*.json"):
        rows = orjson.loads(path.read_bytes())["metrics"].get("tollgate.request.duration", [])
        served[path.stem] = sum(sum(counts) for _, (counts, *_rest) in rows)
    return served


@pytest.mark.slow
def test_every_worker_counts_on_the_page_whichever_answers(two_workers: tuple[str, Path]) -> None:
    url, metrics_dir = two_workers
    assert not (metrics_dir / "999999999.json").exists()  # a previous run's figures are not counted

    def call(_: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as fresh:  # a new connection, so either worker
            response = fresh.post(
                "/v1/chat/completions",
                json={"model": "chat", "messages": HELLO},
                headers={"authorization": f"Bearer {TEST_KEY}"},
            )
            assert response.status_code == 200

    # The kernel hands each new connection to whichever worker accepts first, and a worker that
    # is still starting accepts none: send batches until both have served some.
    sent = 0
    with ThreadPoolExecutor(8) as pool:
        for _ in range(30):
            list(pool.map(call, range(20)))
            sent += 20
            counted = eventually(lambda total=sent: sum(_served_by_file(metrics_dir).values()) == total, 15)
            if counted and len([n for n in _served_by_file(metrics_dir).values() if n]) == 2:
                break
    served = _served_by_file(metrics_dir)
    assert sum(served.values()) == sent
    assert len([n for n in served.values() if n]) == 2, served  # one file per worker, both counting
    # Whichever worker answers the scrape (a new connection each time), the page has them all.
    name = "tollgate_request_duration_seconds_count"
    for _ in range(10):
        assert _value(url, name, tollgate_model="chat") == sent
