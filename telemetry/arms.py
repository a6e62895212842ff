"""Side-by-side metrics: each arm of an alias run as a split or with a mirror, primary and
shadow, by time to first token, tokens, cost and outcome (`gateway/routing/arms.py`).

Labels are configured names only: the alias, the arm (upstream/model from the config),
the role, a gateway error code.
"""

from __future__ import annotations

from gateway.routing.arms import ArmRecord
from telemetry import names as n
from telemetry.instruments import TTFT_BUCKETS
from telemetry.registry import Kind, MetricSpec, Registry

ARM = "tollgate.arm"
ROLE = "tollgate.role"
SUCCESS = "success"

ARM_REQUESTS = MetricSpec(
    "tollgate.arm.requests",
    Kind.COUNTER,
    "{request}",
    "Requests per arm of an alias run side by side: primary (answered the client) or shadow (a mirror's "
    "copy), by outcome (success, or the error; mirror_busy: skipped, too many shadow calls running).",
    (n.MODEL_ALIAS, ARM, ROLE, "tollgate.outcome"),
)
ARM_TIME_TO_FIRST_TOKEN = MetricSpec(
    "tollgate.arm.time_to_first_token",
    Kind.HISTOGRAM,
    "s",
    "Per arm: from sending the request upstream to the first byte of its answer.",
    (n.MODEL_ALIAS, ARM, ROLE),
    TTFT_BUCKETS,
)
ARM_TOKENS = MetricSpec(
    "tollgate.arm.tokens",
    Kind.COUNTER,
    "{token}",
    "Per arm: input and output tokens of the answered requests.",
    (n.MODEL_ALIAS, ARM, ROLE, n.GEN_AI_TOKEN_TYPE),
)
ARM_COST = MetricSpec(
    "tollgate.arm.cost.usd",
    Kind.COUNTER,
    "{USD}",
    "Per arm: cost in dollars at the configured prices (a shadow's whether or not it is metered).",
    (n.MODEL_ALIAS, ARM, ROLE),
)


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
