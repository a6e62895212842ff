"""The metrics the gateway exports: names, units, attributes and buckets, in one place.

The two `gen_ai.client.*` histograms follow the GenAI semantic conventions v1.41.0 (one
measurement per upstream attempt, the gateway being the client); the `tollgate.*` ones
answer the operators' questions the conventions do not cover. Every label is bounded: see
`labels.py` and docs/architecture.md ("Telemetry").
"""

from __future__ import annotations

from telemetry import names as n
from telemetry.registry import Counter, Histogram, Kind, MetricSpec, Registry

# GenAI conventions' bucket advice (gen-ai-metrics.md).
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
# The gateway's own latencies start at a millisecond: its overhead and a cached first token live there.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, *DURATION_BUCKETS)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
)
TURN_TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576)

_CLIENT = (
    n.GEN_AI_OPERATION_NAME,
    n.GEN_AI_PROVIDER_NAME,
    n.GEN_AI_REQUEST_MODEL,
    n.SERVER_ADDRESS,
    n.UPSTREAM,
)

CLIENT_DURATION = MetricSpec(
    "gen_ai.client.operation.duration",
    Kind.HISTOGRAM,
    "s",
    "GenAI operation duration: one upstream attempt, to its last byte.",
    (*_CLIENT, n.ERROR_TYPE),
    DURATION_BUCKETS,
)
CLIENT_TOKEN_USAGE = MetricSpec(
    "gen_ai.client.token.usage",
    Kind.HISTOGRAM,
    "{token}",
    "Input and output tokens of each answered upstream call, as the upstream reported them.",
    (*_CLIENT, n.GEN_AI_TOKEN_TYPE),
    TOKEN_BUCKETS,
)
CLIENT_TIME_TO_FIRST_CHUNK = MetricSpec(
    "gen_ai.client.operation.time_to_first_chunk",
    Kind.HISTOGRAM,
    "s",
    "Time from sending a streamed upstream request to its first chunk.",
    _CLIENT,
    DURATION_BUCKETS,
)
REQUEST_DURATION = MetricSpec(
    "tollgate.request.duration",
    Kind.HISTOGRAM,
    "s",
    "Model requests through the gateway, from receipt to the last byte; error.type is empty on success.",
    (n.WORKFLOW, n.MODEL_ALIAS, n.GEN_AI_OPERATION_NAME, n.ERROR_TYPE, n.API),
    REQUEST_BUCKETS,
)
TIME_TO_FIRST_TOKEN = MetricSpec(
    "tollgate.time_to_first_token",
    Kind.HISTOGRAM,
    "s",
    "Successful model requests, from receipt to the first byte of the answer sent to the client.",
    (n.WORKFLOW, n.MODEL_ALIAS, n.GEN_AI_REQUEST_STREAM),
    TTFT_BUCKETS,
)
TOKENS = MetricSpec(
    "tollgate.tokens",
    Kind.COUNTER,
    "{token}",
    "Tokens by tenant, model alias and workflow: input (cached included), cache_read, output; usage "
    "source reported (by the upstream) or counted (by the gateway, when the upstream reported none).",
    (n.TENANT, n.MODEL_ALIAS, n.GEN_AI_TOKEN_TYPE, n.USAGE_SOURCE, n.WORKFLOW),
)
PROMPT_CACHE_TOKENS = MetricSpec(
    "tollgate.prompt_cache.tokens",
    Kind.COUNTER,
    "{token}",
    "Input tokens by upstream and prompt family (a configured name, else a hashed bucket): input (all) "
    "and cache_read (served from a prefix cache).",
    (n.UPSTREAM, n.PROMPT_FAMILY, n.GEN_AI_TOKEN_TYPE),
)
ATTEMPTS = MetricSpec(
    "tollgate.upstream.attempts",
    Kind.COUNTER,
    "{attempt}",
    "Upstream attempts: first, retry (same upstream again) or fallback (the next candidate), by outcome "
    "and replica (its index in the upstream's replicas).",
    (n.UPSTREAM, n.REPLICA, n.ATTEMPT_KIND, "tollgate.outcome"),
)
SESSION_TURN_TOKENS = MetricSpec(
    "tollgate.session.input_tokens",
    Kind.HISTOGRAM,
    "{token}",
    "Input tokens of each chat request by conversation turn: how a session's context grows.",
    (n.MODEL_ALIAS, "tollgate.turn"),
    TURN_TOKEN_BUCKETS,
)
GROWTH_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)
SESSION_GROWTH = MetricSpec(
    "tollgate.session.input_growth",
    Kind.HISTOGRAM,
    "{token}",
    "Each session turn's average input-token growth per turn of its session so far (the record as "
    "admission read it), by workflow: how fast context grows, and whether checkpoints hold it.",
    (n.WORKFLOW,),
    GROWTH_BUCKETS,
)
SESSION_CHECKPOINTS = MetricSpec(
    "tollgate.session.checkpoints",
    Kind.COUNTER,
    "{checkpoint}",
    "Session checkpoints: advised (x-tollgate-checkpoint: due), summarized (a compact checkpoint "
    "made), summary_failed (the turn went on uncompacted), compacted (a request sent with a summary).",
    (n.TENANT, "tollgate.outcome"),
)
SESSION_TOP = MetricSpec(
    "tollgate.session.top",
    Kind.GAUGE,
    "",
    "The sessions with the most tokens (measure=tokens) and the most spend (measure=usd), ten of "
    "each, from the state store; a session is named by the first 12 hex digits of its key.",
    (n.TENANT, "tollgate.session", "tollgate.measure"),
)
SPEND = MetricSpec(
    "tollgate.spend.usd",
    Kind.COUNTER,
    "{USD}",
    "Spend in dollars at the configured prices, by tenant, model alias and workflow (as the ledger has it).",
    (n.TENANT, n.MODEL_ALIAS, n.WORKFLOW),
)
BUDGET_LIMIT = MetricSpec(
    "tollgate.budget.limit",
    Kind.GAUGE,
    "",
    "Each configured tenant budget: dollars (unit=usd) or tokens (unit=tokens).",
    (n.TENANT, "tollgate.budget.window", "tollgate.budget.unit", "tollgate.budget.kind"),
)
BUDGET_USED = MetricSpec(
    "tollgate.budget.used",
    Kind.GAUGE,
    "",
    "Spent plus reserved in the current window of each tenant budget, from the state store.",
    BUDGET_LIMIT.labels,
)
DECISIONS = MetricSpec(
    "tollgate.policy.decisions",
    Kind.COUNTER,
    "{decision}",
    "Policy decisions by outcome: allow, deny, or unavailable (the engine did not answer).",
    (n.TENANT, "tollgate.outcome"),
)
# Waits for an embedded-engine evaluation thread: well under a millisecond on a healthy worker.
POLICY_QUEUE_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
POLICY_QUEUE = MetricSpec(
    "tollgate.policy.queue",
    Kind.GAUGE,
    "{evaluation}",
    "Embedded policy evaluations now: waiting for a thread, running, or abandoned (still running "
    "after the policy timeout gave up on them); the busiest worker's.",
    ("tollgate.engine", "tollgate.state"),
)
POLICY_QUEUE_WAIT = MetricSpec(
    "tollgate.policy.queue.wait",
    Kind.HISTOGRAM,
    "s",
    "How long each embedded policy evaluation waited for a thread, including waits the timeout ended.",
    ("tollgate.engine",),
    POLICY_QUEUE_WAIT_BUCKETS,
)
POLICY_QUEUE_REFUSED = MetricSpec(
    "tollgate.policy.queue.refused",
    Kind.COUNTER,
    "{evaluation}",
    "Embedded policy evaluations refused at once because policy.eval_queue_max were already waiting.",
    ("tollgate.engine",),
)
TOOL_CALLS_BLOCKED = MetricSpec(
    "tollgate.tool_calls.blocked",
    Kind.COUNTER,
    "{call}",
    "Tool calls the policy blocked: emitted by the model (response) or refused in the request (request).",
    (n.TENANT, "tollgate.side"),
)
REDACTIONS = MetricSpec(
    "tollgate.redactions",
    Kind.COUNTER,
    "{entity}",
    "Sensitive-data entities found in requests, by entity type.",
    (n.TENANT, "tollgate.entity"),
)
CIRCUIT_STATE = MetricSpec(
    "tollgate.upstream.circuit_state",
    Kind.GAUGE,
    "{state}",
    "Circuit of each upstream replica: 0 closed, 1 half-open, 2 open (the worst any worker sees).",
    (n.UPSTREAM, n.REPLICA),
)
LIVE_KEYS_AGE = MetricSpec(
    "tollgate.live_keys.age",
    Kind.GAUGE,
    "s",
    "Seconds since the worker last read the state store's live-key version (the worst worker's): "
    "a revocation reaches the worker within about this long.",
    (),
)
CONFIG_EDITS = MetricSpec(
    "tollgate.config.edits",
    Kind.COUNTER,
    "{edit}",
    "Config file edits each worker looked at: applied, refused (the last good config serves), or "
    "restart_pending (restart-only settings changed; the rest applied).",
    ("tollgate.outcome",),
)
TELEMETRY_DROPPED = MetricSpec(
    "tollgate.telemetry.dropped",
    Kind.COUNTER,
    "{item}",
    "Telemetry the gateway dropped rather than slow requests down: spans (queue full or export failed), "
    "metric exports that failed, and decision-log records.",
    ("tollgate.signal",),
)


# Side by side (telemetry/arms.py records them): the arms of an alias run as a split or mirror.
ARM = "tollgate.arm"
ROLE = "tollgate.role"

ARM_REQUESTS = MetricSpec(
    "tollgate.arm.requests",
    Kind.COUNTER,
    "{request}",
    "Requests per arm of an alias run side by side: primary (answered the client) or shadow (a mirror's "
    "copy), by outcome (success, or the error; mirror_busy: skipped, too many shadow calls running; "
    "not_permitted: skipped, the request's policy does not permit the shadow's upstream).",
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


class Instruments:
    """The recording side of every request-driven metric, created in one registry."""

    def __init__(self, registry: Registry) -> None:
        self.client_duration: Histogram = registry.histogram(CLIENT_DURATION)
        self.client_token_usage: Histogram = registry.histogram(CLIENT_TOKEN_USAGE)
        self.client_time_to_first_chunk: Histogram = registry.histogram(CLIENT_TIME_TO_FIRST_CHUNK)
        self.request_duration: Histogram = registry.histogram(REQUEST_DURATION)
        self.time_to_first_token: Histogram = registry.histogram(TIME_TO_FIRST_TOKEN)
        self.tokens: Counter = registry.counter(TOKENS)
        self.prompt_cache_tokens: Counter = registry.counter(PROMPT_CACHE_TOKENS)
        self.attempts: Counter = registry.counter(ATTEMPTS)
        self.session_turn_tokens: Histogram = registry.histogram(SESSION_TURN_TOKENS)
        self.spend: Counter = registry.counter(SPEND)
        self.session_growth: Histogram = registry.histogram(SESSION_GROWTH)
        self.session_checkpoints: Counter = registry.counter(SESSION_CHECKPOINTS)
        self.decisions: Counter = registry.counter(DECISIONS)
        self.tool_calls_blocked: Counter = registry.counter(TOOL_CALLS_BLOCKED)
        self.redactions: Counter = registry.counter(REDACTIONS)
