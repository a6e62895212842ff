"""Workers' snapshots merge into one page: counters and histograms add up, gauges of live
workers take the worst value, names follow the OpenTelemetry-to-Prometheus translation."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from telemetry.exposition import Snapshot, merge, prometheus_name, render
from telemetry.instruments import CIRCUIT_STATE, CLIENT_DURATION, CLIENT_TOKEN_USAGE, SPEND, TOKENS
from telemetry.registry import MAX_SERIES, OVERFLOW, Registry


def test_names_follow_the_collectors_translation() -> None:
    assert prometheus_name(CLIENT_DURATION) == "gen_ai_client_operation_duration_seconds"
    assert prometheus_name(CLIENT_TOKEN_USAGE) == "gen_ai_client_token_usage"
    assert prometheus_name(SPEND) == "tollgate_spend_usd"  # a counter: its samples end in _total
    assert prometheus_name(CIRCUIT_STATE) == "tollgate_upstream_circuit_state"


def _worker(tokens: float, duration: float, circuit: float) -> Registry:
    registry = Registry()
    registry.counter(TOKENS).add(("t", "m", "input", "reported"), tokens)
    registry.histogram(CLIENT_DURATION).observe(("chat", "openai", "m", "h", "u", ""), duration, "a" * 32)
    registry.observed(CIRCUIT_STATE, lambda: [(("u", "0"), circuit)])
    return registry


def test_counters_and_histograms_add_up_and_gauges_of_live_workers_take_the_worst() -> None:
    one, two, gone = _worker(10, 0.015, 0), _worker(5, 0.5, 1), _worker(1, 0.015, 2)
    specs = one.specs
    merged = merge(
        specs,
        [Snapshot(one.snapshot(), True), Snapshot(two.snapshot(), True), Snapshot(gone.snapshot(), False)],
    )
    assert merged[TOKENS.name] == {("t", "m", "input", "reported"): 16}
    counts, total, _, low, high = merged[CLIENT_DURATION.name][("chat", "openai", "m", "h", "u", "")]
    assert sum(counts) == 3
    assert total == pytest.approx(0.53)
    assert (low, high) == (0.015, 0.5)
    assert merged[CIRCUIT_STATE.name] == {("u", "0"): 1}  # the exited worker's view is not current

    page, _ = render(specs, merged, "text/plain")
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(page.decode())
        for s in family.samples
        if not s.labels.get("le") or s.labels["le"] == "+Inf"
    }
    assert samples["tollgate_tokens_total"] == 16
    assert samples["gen_ai_client_operation_duration_seconds_count"] == 3


def test_new_label_sets_past_the_limit_are_counted_as_overflow() -> None:
    counter = Registry().counter(TOKENS)
    for index in range(MAX_SERIES + 5):
        counter.add((str(index), "m", "input", "reported"))
    assert len(counter.series) == MAX_SERIES + 1
    assert counter.series[(OVERFLOW,) * 4] == 5
