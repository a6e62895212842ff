"""Policy fixtures: a private copy of the shipped policy directory, engines built on it, and
an OPA-protocol server in front of it."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.policy.compiled import compile_revision
from adapters.policy.opa import OpaEngine
from adapters.policy.rego import RegoEngine
from adapters.policy.source import read_policy_dir
from gateway.config import PolicyConfig
from tests.policy.opa_server import OpaProtocolServer, opa_protocol_server

SHIPPED_POLICIES = Path(__file__).resolve().parents[2] / "policies"
ENTRYPOINT = "gateway/authz/decision"


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """A copy of policies/ that a test may edit."""
    target = tmp_path / "policies"
    shutil.copytree(SHIPPED_POLICIES, target)
    return target


@pytest.fixture(scope="session")
def opa_server() -> Iterator[OpaProtocolServer]:
    """The shipped policy behind OPA's REST API (tests must not leave faults set: use `opa`)."""
    with opa_protocol_server(str(SHIPPED_POLICIES)) as server:
        yield server


@pytest.fixture
def opa(opa_server: OpaProtocolServer) -> Iterator[OpaProtocolServer]:
    opa_server.clear_faults()
    yield opa_server
    opa_server.clear_faults()


def policy_config(**overrides: Any) -> PolicyConfig:
    return PolicyConfig.model_validate({"dir": str(SHIPPED_POLICIES), **overrides})


@pytest.fixture
async def rego_engine() -> AsyncIterator[RegoEngine]:
    """The embedded engine on the shipped policy, compiled directly (no reload watcher)."""
    engine = RegoEngine(compile_revision(read_policy_dir(SHIPPED_POLICIES), ENTRYPOINT), policy_config())
    yield engine
    await engine.aclose()


@pytest.fixture
async def opa_engine(opa: OpaProtocolServer) -> AsyncIterator[OpaEngine]:
    engine = OpaEngine(policy_config(engine="opa", opa={"url": opa.url, "timeout_ms": 2000}))
    yield engine
    await engine.aclose()
