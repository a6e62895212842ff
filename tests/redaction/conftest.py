"""A gateway whose tenants redact in every mode, in front of the shared simulator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import openai_upstream
from tests.servers import RunningGateway, gateway_config, running_gateway

TENANTS: dict[str, dict[str, Any]] = {
    "mask": {"request": "mask", "response": "mask"},
    "tokenize": {"request": "tokenize", "response": "tokenize"},
    "block": {"request": "block"},
    "outblock": {"response": "block"},
    "off": {},
    "emailonly": {"request": "mask", "entities": ["EMAIL"]},
    "custom": {
        "request": "mask",
        "patterns": {"EMPLOYEE_ID": r"EMP-\d{6}"},
        "terms": {"CODENAME": ["Bluebird"]},
        "scan_tool_descriptions": True,
    },
}


def key_for(tenant: str) -> str:
    return f"tg-test-redaction-{tenant}"


def redaction_config(sim: RunningSimulator, **overrides: Any) -> Any:
    return gateway_config(
        upstreams={"local": openai_upstream(sim.openai_base_url(0))},
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "embed": [{"upstream": "local", "model": "e"}],
        },
        tenants={name: {"models": ["*"], "redaction": block} for name, block in TENANTS.items()},
        keys=[{"tenant": name, "hash": hash_key(key_for(name))} for name in TENANTS],
        **overrides,
    )


@pytest.fixture(scope="module")
def redaction_gateway(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    with running_gateway(redaction_config(upstream_sim)) as running:
        yield running
