"""A gateway with a policy block, in front of the shared simulator, for the policy's
end-to-end tests: tenants alpha (TEST_KEY) and beta (OTHER_TENANT_KEY) added to a copy of
the shipped policy data, and a data class "offsite" that may go to the backup upstream only."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from gateway.config import GatewayConfig
from simulator import RunningSimulator
from tests.harness import openai_upstream
from tests.policy.conftest import SHIPPED_POLICIES
from tests.servers import gateway_config

TENANTS = {
    "alpha": {
        "models": ["chat", "failover", "embed"],
        "tools": ["search"],
        "on_tool_violation": "reject",
        "limits": {"max_tokens": 64},
        "upstreams": ["local", "backup"],
    },
    "beta": {"models": ["chat"], "tools": [], "on_tool_violation": "strip"},
}


def write_policy_dir(target: Path, tenants: dict[str, Any] | None = None) -> Path:
    """policies/ copied to `target`, its data extended with the test tenants."""
    shutil.copytree(SHIPPED_POLICIES, target)
    data_file = target / "data.yaml"
    data = yaml.safe_load(data_file.read_text())
    data["tenants"].update(tenants or TENANTS)
    data["data_classes"]["offsite"] = {"upstreams": ["backup"]}
    data_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def policy_gateway_config(sim: RunningSimulator, policy: dict[str, Any], **overrides: Any) -> GatewayConfig:
    return gateway_config(
        upstreams={
            "local": openai_upstream(sim.openai_base_url(0)),
            "backup": openai_upstream(sim.openai_base_url(1)),
        },
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "failover": [
                {"upstream": "local", "model": "sim-model"},
                {"upstream": "backup", "model": "backup-model"},
            ],
            "embed": [{"upstream": "local", "model": "@cf/baai/bge-large-en-v1.5"}],
            "forbidden": [{"upstream": "local", "model": "sim-model"}],
        },
        policy=policy,
        **overrides,
    )
