"""A traced gateway in front of the shared simulator, exporting to a real OTLP receiver."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from simulator import RunningSimulator
from tests.harness import openai_upstream
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway
from tests.telemetry.receiver import OtlpReceiver, otlp_receiver


def telemetry_block(endpoint: str, **traces: Any) -> dict[str, Any]:
    return {
        "service_name": "tollgate-test",
        "resource_attributes": {"deployment.environment.name": "test"},
        "traces": {
            "exporter": "otlp",
            "otlp": {"endpoint": endpoint},
            "sampling_ratio": 1.0,
            "export_interval_s": 0.05,
            **traces,
        },
        "metrics": {"otlp": {"endpoint": endpoint, "interval_s": 0.2}},
    }


def traced_config(sim: RunningSimulator, telemetry: dict[str, Any], **overrides: Any) -> Any:
    """chat (one upstream), failover (local, then backup), pooled (two replicas, one retry);
    `models` in the overrides adds aliases."""
    extra_models = overrides.pop("models", {})
    return gateway_config(
        upstreams={
            "local": openai_upstream(sim.openai_base_url(0)),
            "backup": openai_upstream(sim.openai_base_url(1)),
            "pool": {
                **openai_upstream(sim.openai_base_url(0)),
                "base_url": None,
                "replicas": [sim.openai_base_url(0), sim.openai_base_url(1)],
                "balance": "round_robin",
                "retries": 1,
            },
        },
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "failover": [
                {"upstream": "local", "model": "sim-model"},
                {"upstream": "backup", "model": "backup-model"},
            ],
            "pooled": [{"upstream": "pool", "model": "sim-model"}],
            "embed": [{"upstream": "local", "model": "@cf/baai/bge-large-en-v1.5"}],
            **extra_models,
        },
        telemetry=telemetry,
        **overrides,
    )


@pytest.fixture(scope="session")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as running:
        yield running


@pytest.fixture(scope="session")
def traced(upstream_sim: RunningSimulator, receiver: OtlpReceiver) -> Iterator[RunningGateway]:
    with running_gateway(traced_config(upstream_sim, telemetry_block(receiver.endpoint))) as running:
        yield running


@pytest.fixture(scope="session")
def traced_client(traced: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=traced.base_url, api_key=TEST_KEY, max_retries=0) as client:
        yield client
