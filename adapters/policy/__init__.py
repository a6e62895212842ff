"""Policy engines behind `gateway.ports.PolicyEngine`; `POLICY_ENGINES` is the registry
config names them by (`policy.engine`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from adapters.policy.opa import OpaEngine
from adapters.policy.source import PolicyLoadError
from gateway.config import PolicyConfig
from gateway.ports import PolicyEngine


async def _open_rego(config: PolicyConfig) -> PolicyEngine:
    # Imported here: regopy's native library is loaded only by a gateway that evaluates in process.
    from adapters.policy.rego import RegoEngine

    return await RegoEngine.open(config)


POLICY_ENGINES: dict[str, Callable[[PolicyConfig], Awaitable[PolicyEngine]]] = {
    "rego": _open_rego,
    "opa": OpaEngine.open,
}

__all__ = ["POLICY_ENGINES", "PolicyLoadError", "open_policy_engine"]


async def open_policy_engine(config: PolicyConfig) -> PolicyEngine:
    """Raises PolicyLoadError when the embedded engine's policy directory is missing or refused."""
    return await POLICY_ENGINES[config.engine](config)
