"""Side-by-side metrics: each arm of an alias run as a split or with a mirror, primary and
shadow, by time to first token, tokens, cost and outcome (`gateway/routing/arms.py`).

Labels are configured names only: the alias, the arm (upstream/model from the config),
the role, a gateway error code.
"""

from __future__ import annotations

from gateway.routing.arms import ArmRecord
from telemetry.instruments import ARM_COST, ARM_REQUESTS, ARM_TIME_TO_FIRST_TOKEN, ARM_TOKENS
from telemetry.registry import Registry

SUCCESS = "success"


class ArmMetrics:
    def __init__(self, registry: Registry) -> None:
        self._requests = registry.counter(ARM_REQUESTS)
        self._ttft = registry.histogram(ARM_TIME_TO_FIRST_TOKEN)
        self._tokens = registry.counter(ARM_TOKENS)
        self._cost = registry.counter(ARM_COST)

    def record(self, record: ArmRecord) -> None:
        arm = (record.alias, record.arm, record.role)
        self._requests.add((*arm, record.error or SUCCESS))
        if record.ttft_s is not None:
            self._ttft.observe(arm, record.ttft_s)
        if record.error is None:
            self._tokens.add((*arm, "input"), record.prompt_tokens)
            self._tokens.add((*arm, "output"), record.completion_tokens)
            self._cost.add(arm, record.cost_micros / 1_000_000)
