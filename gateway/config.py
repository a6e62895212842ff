"""The gateway's configuration: one YAML file, parsed once into typed, validated objects.

This is the one module that reads `os.environ`: for `${VAR}` interpolation in the file
and for the handful of TOLLGATE_* variables named below.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.redaction import entities as redaction_entities
from gateway.routing_config import Priority, RoutingConfig
from gateway.sessions.config import SessionLimitsConfig, SessionsConfig, TenantSessionsConfig
from gateway.telemetry_config import TelemetryConfig

CONFIG_ENV = "TOLLGATE_CONFIG"
"""Path of the config file the server loads. Default: ./tollgate.yaml."""

DEFAULT_CONFIG_PATH = "tollgate.yaml"

SIM_PORT_ENV = "TOLLGATE_SIM_PORT"
"""Port of the local upstream simulator, set by `tollgate dev --sim-port` before the config is
read; the shipped tollgate.yaml's upstream is `http://127.0.0.1:${TOLLGATE_SIM_PORT:-8081}/v1`."""

METRICS_DIR_ENV = "TOLLGATE_METRICS_DIR"
"""Directory where the workers of one server share their metrics (see telemetry/worker_snapshots.py).
Set by `tollgate serve` to a fresh directory; unset, each worker's /metrics shows its own figures."""

CACHE_DIR_ENV = "TOLLGATE_CACHE_DIR"
"""Directory of this user's cache (passed policy checks, see docs/policies.md). Unset: the
XDG cache directory, `$XDG_CACHE_HOME/tollgate`, else `~/.cache/tollgate`."""

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """The config file is missing, unreadable or invalid; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    workers: int = Field(2, ge=1, le=64)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # Time allowed for a whole request unless the client asks for less (x-request-timeout).
    request_timeout_s: float = Field(600.0, gt=0)
    access_log: bool = True
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Key of the UUID sent upstream as a request's id (derived from the request id, never the
    # client's text). The same on every replica: the same id upstream; unset: random per process.
    request_id_key: str | None = Field(None, min_length=16)
    # On SIGTERM, how long the port stays open at least, /readyz answering 503 and new calls
    # refused with 503, while calls in flight finish (gateway/worker_server.py).
    drain_s: float = Field(2.0, ge=0)
    # How often the config file (and its keys file) is looked at for edits; 0: never
    # (gateway/config_reload.py says what an edit can change without a restart).
    config_reload_interval_s: float = Field(1.0, ge=0)


class TimeoutsConfig(_Strict):
    connect_s: float = Field(5.0, gt=0)
    # Until a stream's first event (its head included): the head comes at once, the event after prefill.
    first_byte_s: float = Field(60.0, gt=0)
    # Until the response head of every request. A non-streamed answer's head comes after the whole
    # generation, so this must exceed the longest non-streamed generation served; a hung upstream
    # fails over to the next candidate after it rather than at the request deadline.
    response_headers_s: float = Field(300.0, gt=0)
    # Longest silence allowed between two chunks of a stream.
    between_chunks_s: float = Field(60.0, gt=0)
    # Added to first_byte_s and response_headers_s per thousand (estimated) prompt tokens: long
    # prompts are slow to start.
    first_byte_per_1k_tokens_s: float = Field(0.25, ge=0)


class HealthConfig(_Strict):
    """Passive health (a circuit breaker per replica) and active probes."""

    failure_threshold: int = Field(5, ge=1)  # consecutive failed attempts that open a replica's circuit
    cooldown_s: float = Field(10.0, gt=0)  # open for this long, then one trial request...
    max_cooldown_s: float = Field(120.0, gt=0)  # ...the cool-down doubling after each failed trial
    # Seconds between active probes of each replica; 0 turns them off. Unset: 5 for a pool of
    # replicas, off for a single endpoint (its circuit's trial request does the probing).
    probe_interval_s: float | None = Field(None, ge=0)
    probe_timeout_s: float = Field(5.0, gt=0)  # a probe unanswered for this long has failed...
    probe_failures: int = Field(3, ge=1)  # ...and this many consecutive failed probes open the circuit
    # A replica with requests in flight, or that answered one this recently, is busy, not down:
    # servers that serve one request at a time leave their health route waiting meanwhile, so
    # only a refused connection then counts against it (its requests have their own timeouts).
    busy_grace_s: float = Field(30.0, ge=0)


class _UpstreamBase(_Strict):
    timeouts: TimeoutsConfig = TimeoutsConfig()
    max_connections: int = Field(512, ge=1)
    retries: int = Field(2, ge=0, le=10)  # more attempts on this upstream (other replicas) after a failure
    max_retry_wait_s: float = Field(2.0, ge=0)  # the longest Retry-After the gateway waits out itself
    health: HealthConfig = HealthConfig()
    # The header that carries the request's id to this upstream (None: not sent), and its form:
    # uuid (8-4-4-4-12) or gateway (req_ and 32 hex digits). Never the client's X-Request-ID.
    request_id_header: str | None = Field("x-request-id", pattern=r"^[A-Za-z0-9-]+$")
    request_id_format: Literal["uuid", "gateway"] = "uuid"


class OpenAICompatUpstream(_UpstreamBase):
    """Any OpenAI-compatible server: vLLM, SGLang, llama.cpp's llama-server, the simulator."""

    kind: Literal["openai_compat"]
    base_url: str  # up to and including /v1
    api_key: str | None = None
    provider: str = "openai"  # GenAI provider name reported in telemetry
    health_path: str = "/health"  # relative to the server root, not to base_url
    # A pool: several servers of the same model, each URL like base_url (which then defaults
    # to the first). `balance` picks the replica per request; see README, "A self-hosted pool".
    replicas: list[str] = []
    balance: Literal["affinity", "round_robin", "least_loaded"] = "affinity"
    bounded_load_factor: float = Field(1.25, ge=1.05)  # affinity spills above this x the average load
    min_load_bound: int = Field(16, ge=1)  # ...but never below this many in flight (per gateway process)

    @model_validator(mode="before")
    @classmethod
    def _base_url_or_replicas(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("replicas"):
            if data.get("base_url") is not None:
                raise ValueError("give either base_url or replicas, not both")
            replicas = data["replicas"]
            if isinstance(replicas, list) and isinstance(replicas[0], str):
                data = {**data, "base_url": replicas[0]}
        return data

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        return _check_url(v)

    @field_validator("replicas")
    @classmethod
    def _replica_urls(cls, v: list[str]) -> list[str]:
        urls = [_check_url(url) for url in v]
        if len(set(urls)) != len(urls):
            raise ValueError("replicas must be distinct")
        return urls


class WorkersAIUpstream(_UpstreamBase):
    """Cloudflare Workers AI, through its OpenAI-compatible or its native /ai/run endpoint."""

    kind: Literal["workers_ai"]
    account_id: str = Field(min_length=1)
    api_token: str = Field(min_length=1)
    api: Literal["openai", "native"] = "openai"
    base_url: str = "https://api.cloudflare.com/client/v4"
    # Fail fast with 3040 instead of queueing for capacity, so the gateway can fall back.
    reject_if_busy: bool = False
    # Models (upstream ids) whose async jobs go through Workers AI's own queue (`queueRequest`);
    # "*" for every model. Other jobs run as synchronous calls when pulled.
    async_queue_models: list[str] = []

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        return _check_url(v)


UpstreamConfig = Annotated[OpenAICompatUpstream | WorkersAIUpstream, Field(discriminator="kind")]


class CandidateConfig(_Strict):
    upstream: str
    model: str = Field(min_length=1)
    # The model's class (e.g. "frontier", "small"), matched against a policy's route.model_class.
    class_: str | None = Field(None, alias="class", min_length=1)
    # Side by side (README, "Side by side"): a weight makes the alias a split among its weighted
    # candidates, sticky per session; a mirror (percent of requests) makes this candidate a
    # shadow, sent a copy and never answering the client.
    weight: float | None = Field(None, gt=0)
    mirror: float | None = Field(None, gt=0, le=100)

    @model_validator(mode="after")
    def _weight_or_mirror(self) -> CandidateConfig:
        if self.weight is not None and self.mirror is not None:
            raise ValueError("a candidate is either weighted (split) or a mirror, not both")
        return self


RedactMode = Literal["off", "mask", "tokenize", "block"]


class RedactionConfig(_Strict):
    """What happens to sensitive data when no policy decision says otherwise (see README, Redaction)."""

    request: RedactMode = "off"
    response: RedactMode = "off"
    entities: list[str] = []  # kind or group names; empty means every kind
    patterns: dict[str, str] = {}  # custom kind name -> regular expression
    terms: dict[str, list[str]] = {}  # custom kind name -> literal terms (whole words, any case)
    fail_open: bool = False  # on a detection failure, pass the text unredacted (logged, counted)
    scan_tool_descriptions: bool = False

    @model_validator(mode="after")
    def _names_resolve(self) -> RedactionConfig:
        custom = set(self.patterns) | set(self.terms)
        for name in custom:
            if not re.fullmatch(redaction_entities.NAME_PATTERN, name) or name in redaction_entities.KNOWN:
                raise ValueError(f"custom kind {name!r}: use a new name in UPPER_SNAKE_CASE")
        for name, pattern in self.patterns.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"patterns.{name}: not a valid regular expression ({exc})") from None
        for name in self.entities:
            if name not in redaction_entities.KNOWN and name not in custom:
                raise ValueError(f"entities: {name!r} is not a known kind, group or custom kind")
        return self


class BudgetConfig(_Strict):
    """A spending cap per UTC day or calendar month, in dollars, tokens or both.

    hard: never exceeded (requests are clamped, then refused); soft: crossing it changes
    the budget band the policy sees ("soft_exceeded").
    """

    window: Literal["day", "month"]
    usd: float | None = Field(None, gt=0)
    tokens: int | None = Field(None, ge=1)
    kind: Literal["hard", "soft"] = "hard"

    @model_validator(mode="after")
    def _has_amount(self) -> BudgetConfig:
        if self.usd is None and self.tokens is None:
            raise ValueError("a budget needs usd, tokens or both")
        return self


class RateLimitConfig(_Strict):
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)  # prompt estimate + max output tokens, at admission


class PriceConfig(_Strict):
    """Dollars per million tokens; cached input defaults to the input price."""

    input: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
    output: float = Field(ge=0)


class StateConfig(_Strict):
    """Where budgets, rate limits, idempotency keys and the spend ledger live."""

    store: Literal["sqlite", "redis"] = "sqlite"
    sqlite_path: str = "tollgate-state.db"  # relative to the working directory; shared by all workers
    redis_url: str | None = None  # e.g. redis://127.0.0.1:6379/0
    redis_cluster: bool = False  # redis_url names one node of a Redis Cluster; the rest are discovered
    key_prefix: str = Field("tollgate", pattern=r"^[A-Za-z0-9_.:-]+$")  # redis keys start with it
    timeout_s: float = Field(1.0, gt=0)  # redis: connect and command timeout
    # Tenants whose requests go through unmetered (logged) when the store cannot be reached;
    # every other metered tenant is refused with 503.
    fail_open_tenants: list[str] = []
    lease_s: float = Field(60.0, gt=0)  # a reservation outlives its request's deadline by this much
    settled_keep_s: int = Field(900, ge=60)  # settled ids remembered this long (settle is idempotent)
    # Busy plans take slices of their budgets and rate limits (leases) and settle in batches;
    # off: every request is reserved and settled on its own (docs/architecture.md, Leases).
    leases: bool = True

    @model_validator(mode="after")
    def _store_target(self) -> StateConfig:
        if self.store == "redis" and not self.redis_url:
            raise ValueError("state.redis_url is required when state.store is redis")
        return self


class ImageTokensConfig(_Strict):
    """How many input tokens an image part is estimated at (gateway/metering/images.py)."""

    patch_px: int = Field(28, ge=1)  # one token per patch_px x patch_px square of the image
    max_per_image: int = Field(16_384, ge=1)  # and at most this many (an image URL: exactly this)


class MeteringConfig(_Strict):
    default_max_tokens: int = Field(4096, ge=1)  # output cap when neither client nor policy sets one
    # When a hard budget cannot cover even this many output tokens, the request is refused.
    min_max_tokens: int = Field(16, ge=1)
    idempotency_ttl_s: float = Field(86_400.0, gt=0)  # how long a response is kept for replays
    band_cache_s: float = Field(1.0, ge=0)  # how long a budget band read for the policy is reused
    image_tokens: ImageTokensConfig = ImageTokensConfig()  # the rule for models not named below
    image_tokens_by_model: dict[str, ImageTokensConfig] = {}  # upstream model id -> its rule


class ResponsesConfig(_Strict):
    """Where `/v1/responses` keeps the responses clients ask it to store (`previous_response_id`)."""

    store: Literal["sqlite", "redis", "off"] = "sqlite"  # off: nothing is stored, `store` answers false
    sqlite_path: str = "tollgate-responses.db"  # opened at the first stored response, not before
    redis_url: str | None = None
    key_prefix: str = Field("tollgate", pattern=r"^[A-Za-z0-9_.:-]+$")
    timeout_s: float = Field(1.0, gt=0)  # redis: connect and command timeout
    retention_s: int = Field(30 * 86400, ge=60)  # a stored response is deleted this long after it was stored

    @model_validator(mode="after")
    def _store_target(self) -> ResponsesConfig:
        if self.store == "redis" and not self.redis_url:
            raise ValueError("responses.redis_url is required when responses.store is redis")
        return self


class AdminConfig(_Strict):
    """Operator credentials for /admin/* (hashes only, as for keys: `tollgate keys create`)."""

    tokens: list[str] = Field(min_length=1)

    @field_validator("tokens")
    @classmethod
    def _hashes(cls, v: list[str]) -> list[str]:
        for token in v:
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", token):
                raise ValueError("admin.tokens holds sha256:<64 hex> hashes, never the tokens themselves")
        return v


class TenantConfig(_Strict):
    # Model aliases this tenant may use; ["*"] means all of them.
    models: list[str] = ["*"]
    budgets: list[BudgetConfig] = []
    rate_limits: RateLimitConfig | None = None
    redaction: RedactionConfig | None = None  # replaces the top-level `redaction` for this tenant
    sessions: TenantSessionsConfig = TenantSessionsConfig()  # replaces the top-level session settings


class KeyConfig(_Strict):
    tenant: str
    hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    label: str = ""
    workflow: str | None = None  # the request's workflow when it sends no x-workflow (routing.workflows)
    priority: Priority | None = None  # the request's priority when it sends no x-priority (else normal)
    budgets: list[BudgetConfig] = []  # in addition to the tenant's
    rate_limits: RateLimitConfig | None = None  # in addition to the tenant's
    session_limits: SessionLimitsConfig | None = None  # replaces the tenant's, field by field


class LiveKeysConfig(_Strict):
    """Keys managed at runtime (`tollgate keys`, /admin/keys), kept in the `state` store
    (hashes only) beside the keys of this file. With this block, metering is on."""

    # How often each worker reads the store's key version; a revocation reaches every worker
    # of every replica within about this long (bounded so that it stays under a second).
    poll_interval_ms: int = Field(250, ge=10, le=500)


class AuditConfig(_Strict):
    """The decision log: one hash-chained record per policy decision and per completed request."""

    sink: Literal["jsonl", "redis"] = "jsonl"
    path: str = "tollgate-audit.jsonl"  # jsonl: relative to the working directory
    fsync: Literal["always", "never"] = "always"  # jsonl: fsync every batch of records
    # jsonl, not mandatory: the batches written meanwhile are fsynced together, at most this
    # often (a mandatory record is fsynced with its batch, before its request goes on).
    fsync_interval_ms: int = Field(200, ge=0, le=10_000)
    redis_url: str | None = None  # redis: e.g. redis://127.0.0.1:6379/0
    stream: str = Field("tollgate:audit", min_length=1)  # redis: the stream key
    # Mandatory: a request whose decision record cannot be written is refused (503).
    # Otherwise writing never delays a request; records beyond queue_size are dropped and counted.
    mandatory: bool = False
    queue_size: int = Field(10_000, ge=1)
    # Not mandatory: a batch is written at most this long after its first record, so a busy
    # gateway writes (and fsyncs) many records at once. 0: as soon as the writer is free.
    flush_interval_ms: int = Field(50, ge=0, le=10_000)
    write_timeout_s: float = Field(5.0, gt=0)  # mandatory: longest wait for a record to be written

    @model_validator(mode="after")
    def _sink_target(self) -> AuditConfig:
        if self.sink == "redis" and not self.redis_url:
            raise ValueError("audit.redis_url is required when audit.sink is redis")
        return self


class OpaConfig(_Strict):
    url: str  # the OPA server, e.g. http://127.0.0.1:8181
    timeout_ms: int = Field(250, ge=1)  # per decision request; over it the request is refused (503)
    max_connections: int = Field(64, ge=1)

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        return _check_url(v)


class PolicyCacheConfig(_Strict):
    enabled: bool = True
    max_entries: int = Field(10_000, ge=1)
    # Entries older than this are asked again. With engine: opa the gateway cannot see the
    # server's reloads, so its decisions are cached only when this is set.
    ttl_s: float | None = Field(None, gt=0)


class PolicyConfig(_Strict):
    """Policy decisions (docs/policies.md). Without this block there is no decide stage."""

    engine: Literal["rego", "opa"] = "rego"  # rego: in process (regopy); opa: an OPA server
    dir: str = "policies"  # *.rego, *_test.rego and data.yaml/json; relative to the config file
    entrypoint: str = Field("gateway/authz/decision", pattern=r"^[A-Za-z_]\w*(/[A-Za-z_]\w*)*$")
    opa: OpaConfig | None = None
    cache: PolicyCacheConfig = PolicyCacheConfig()
    timeout_ms: int = Field(1000, ge=1)  # longest wait for a decision, whichever the engine
    reload_interval_s: float = Field(0.25, gt=0)  # rego: how often policy.dir and state_dir are looked at
    # rego: where the workers of one machine share checked revisions; default: under the temp directory
    state_dir: str | None = None
    eval_threads: int = Field(2, ge=1, le=64)  # rego: evaluations run in this many threads
    # rego: threads left finishing an evaluation that timed out, beyond eval_threads (docs/policies.md)
    eval_abandoned_max: int = Field(4, ge=0, le=256)
    eval_queue_max: int = Field(256, ge=1)  # rego: evaluations waiting for a thread; past it, 503 at once
    # rego: a revision whose check passed is not checked again (the per-user cache, docs/policies.md)
    check_cache: bool = True

    @model_validator(mode="after")
    def _opa_target(self) -> PolicyConfig:
        if self.engine == "opa" and self.opa is None:
            raise ValueError("policy.opa (with its url) is required when policy.engine is opa")
        return self


class JobsConfig(_Strict):
    """Async jobs: `Prefer: respond-async`, OpenAI's Batch API and webhooks (docs/async.md)."""

    store: Literal["sqlite", "redis"] = "sqlite"
    sqlite_path: str = "tollgate-jobs.db"  # relative to the working directory; shared by all workers
    redis_url: str | None = None  # e.g. redis://127.0.0.1:6379/0
    redis_cluster: bool = False  # redis_url names one node of a Redis Cluster; the rest are discovered
    key_prefix: str = Field("tollgate", pattern=r"^[A-Za-z0-9_.:-]+$")
    completion_window_s: float = Field(86_400.0, gt=0)  # a job not done by then fails (batches: "24h")
    results_keep_s: float = Field(7 * 86_400.0, gt=0)  # results, batches and files are deleted after this
    max_file_bytes: int = Field(100 * 1024 * 1024, ge=1024)  # an upload past this is refused unread
    max_batch_lines: int = Field(50_000, ge=1)
    # Whether the gateway's own workers run jobs; false: they only accept them, and
    # `tollgate jobs-worker` processes (at a lower OS priority) run them.
    pull: bool = True
    concurrency: int = Field(32, ge=1, le=4096)  # jobs running at once in one worker process
    # Of those, how many may be waiting on the upstream at once (default: all). An upstream
    # that answers in order (one queue) makes an interactive request wait behind every job
    # request sent before it: a low bound keeps that queue short, at the cost of the drain
    # rate against a slow upstream (a job's upstream call then holds a slot the longer).
    upstream_concurrency: int | None = Field(None, ge=1, le=4096)
    claim_batch: int = Field(16, ge=1, le=1000)  # jobs claimed per store round trip
    idle_poll_s: float = Field(0.25, gt=0)  # how often an idle worker looks for jobs
    visibility_s: float = Field(60.0, ge=1)  # a claim not extended for this long is taken over
    # Sync traffic keeps priority: a worker claims jobs only while fewer synchronous model calls
    # than this are in flight in it, and not for `throttle_pause_s` after an upstream throttled.
    pull_while_sync_below: int = Field(1, ge=1)
    throttle_pause_s: float = Field(2.0, ge=0)
    yield_to_sync: bool = (
        True  # a running job also waits, at each step, while a synchronous call is in flight
    )
    # Job steps started per pass of the event loop: a burst of jobs (a claimed batch, a group
    # commit's answers) runs spread over passes, so a request arriving meanwhile waits for a
    # few job steps, not for the burst (gateway/jobs/turns.py). null: unpaced.
    steps_per_pass: int | None = Field(1, ge=1, le=4096)
    # Every process of the host sees every gateway process's synchronous calls in flight (a
    # shared file, one slot per process), so a `jobs-worker` yields to them too. The file:
    # `host_load_file`, by default `<sqlite_path>.load` with the SQLite store; the Redis store
    # needs it named (any path local to the host, the same for its gateways and workers).
    share_sync_load: bool = True
    host_load_file: str | None = None
    retry_base_s: float = Field(1.0, gt=0)  # backoff after a capacity error, doubling per attempt...
    retry_max_s: float = Field(60.0, gt=0)  # ...up to this, with jitter
    attempt_timeout_s: float | None = Field(
        None, gt=0
    )  # one attempt's deadline; default server.request_timeout_s
    native_poll_s: float = Field(1.0, gt=0)  # first poll of an upstream's own queue, then backing off...
    native_poll_max_s: float = Field(30.0, gt=0)  # ...up to this
    webhook_timeout_s: float = Field(10.0, gt=0)
    webhook_attempts: int = Field(8, ge=1, le=50)  # deliveries tried, backing off from 1 s, before giving up
    webhook_retry_base_s: float = Field(1.0, gt=0)  # the wait after a failed delivery, doubling each time
    # The operator's bound on webhook URLs; the policy's destinations.webhook_url decides within
    # it (gateway/jobs/webhook_destinations.py). Hosts: "*.example.com", "*": any public host.
    webhook_hosts: list[str] = ["*"]
    webhook_allow_private: bool = False  # true: a policy may allow private addresses it names

    @property
    def host_load_path(self) -> str | None:
        """The host load file in force (None: each process sees only its own synchronous calls)."""
        if not self.share_sync_load:
            return None
        if self.host_load_file:
            return self.host_load_file
        return f"{self.sqlite_path}.load" if self.store == "sqlite" else None

    @model_validator(mode="after")
    def _redis_needs_url(self) -> JobsConfig:
        if self.store == "redis" and not self.redis_url:
            raise ValueError("jobs.store redis needs jobs.redis_url")
        return self


class GatewayConfig(_Strict):
    server: ServerConfig = ServerConfig()
    upstreams: dict[str, UpstreamConfig]
    # Client-facing alias -> ordered candidates (first is preferred, the rest are fallbacks).
    models: dict[str, list[CandidateConfig]]
    tenants: dict[str, TenantConfig]
    keys: list[KeyConfig] = []
    keys_file: str | None = None  # more keys, same shape as `keys`, resolved relative to the config file
    live_keys: LiveKeysConfig | None = None  # keys in the state store, changed at runtime
    audit: AuditConfig | None = None  # no decision log without it
    policy: PolicyConfig | None = None  # no policy decisions without it
    redaction: RedactionConfig = RedactionConfig()  # default for tenants without their own
    state: StateConfig | None = None  # sqlite by default once a tenant or key has budgets or rate limits
    metering: MeteringConfig = MeteringConfig()
    prices: dict[str, PriceConfig] = {}  # upstream model id -> price; adds to and overrides the defaults
    admin: AdminConfig | None = None  # no /admin/* endpoints without it
    responses: ResponsesConfig = ResponsesConfig()  # stored responses of /v1/responses
    telemetry: TelemetryConfig = TelemetryConfig()  # traces off, metrics on /metrics, unless set
    sessions: SessionsConfig = SessionsConfig()
    # Upstream model id -> context window in tokens; adds to and overrides the built-in ones.
    context_windows: dict[str, Annotated[int, Field(ge=1)]] = {}
    routing: RoutingConfig = RoutingConfig()  # workflows, named prompt families, choices, mirrors
    jobs: JobsConfig | None = None  # no async jobs, batches or webhooks without it

    @property
    def workflow_names(self) -> list[str]:
        """The workflows requests may name: `routing.workflows`, else `telemetry.labels.workflows`."""
        return self.routing.workflows or self.telemetry.labels.workflows

    @field_validator("models")
    @classmethod
    def _non_empty_routes(cls, v: dict[str, list[CandidateConfig]]) -> dict[str, list[CandidateConfig]]:
        for alias, candidates in v.items():
            if not candidates:
                raise ValueError(f"model alias {alias!r} has no candidates")
            if all(c.mirror is not None for c in candidates):
                raise ValueError(f"model alias {alias!r} has only mirrors: one candidate must answer")
        return v

    @model_validator(mode="after")
    def _references_resolve(self) -> GatewayConfig:
        for alias, candidates in self.models.items():
            for candidate in candidates:
                if candidate.upstream not in self.upstreams:
                    raise ValueError(
                        f"models.{alias}: upstream {candidate.upstream!r} is not defined under upstreams"
                    )
        for name, tenant in self.tenants.items():
            for alias in tenant.models:
                if alias != "*" and alias not in self.models:
                    raise ValueError(f"tenants.{name}.models: {alias!r} is not a model alias")
        for index, key in enumerate(self.keys):
            if key.tenant not in self.tenants:
                raise ValueError(f"keys[{index}].tenant: {key.tenant!r} is not a tenant")
            if key.workflow is not None and key.workflow not in self.workflow_names:
                raise ValueError(f"keys[{index}].workflow: {key.workflow!r} is not in routing.workflows")
        for alias in self.routing.choose:
            if alias not in self.models:
                raise ValueError(f"routing.choose: {alias!r} is not a model alias")
        summarizers = [self.sessions.checkpoints, *self.sessions.workflows.values()]
        summarizers += [t.sessions.checkpoints for t in self.tenants.values() if t.sessions.checkpoints]
        for checkpoints in summarizers:
            if checkpoints.summarizer is not None and checkpoints.summarizer not in self.models:
                raise ValueError(f"sessions: summarizer {checkpoints.summarizer!r} is not a model alias")
        for name in self.state.fail_open_tenants if self.state else ():
            if name not in self.tenants:
                raise ValueError(f"state.fail_open_tenants: {name!r} is not a tenant")
        return self


class _KeysFile(_Strict):
    keys: list[KeyConfig] = []


def interpolate(value: str, where: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace ${VAR} and ${VAR:-default}; an unset variable without a default is an error."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = env.get(name)
        if found is None or found == "":
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return found

    return _ENV_REF.sub(replace, value)


def _interpolate_tree(node: Any, source: str, path: str = "") -> Any:
    """Interpolate every string value (never keys, never comments) of a parsed document."""
    if isinstance(node, str):
        return interpolate(node, f"{source}: {path or '(top level)'}")
    if isinstance(node, dict):
        return {k: _interpolate_tree(v, source, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate_tree(v, source, f"{path}[{i}]") for i, v in enumerate(node)]
    return node


def _check_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    return value.rstrip("/")


def _format_validation_error(path: str, error: ValidationError) -> str:
    lines = [f"{path}: invalid configuration"]
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        if len(loc) > 2 and loc[0] == "upstreams" and loc[2] in ("openai_compat", "workers_ai"):
            del loc[2]  # the union's `kind` tag, which pydantic adds to the path: not a key of the file
        where = ".".join(loc) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return _interpolate_tree(data, str(path))


def load_config(path: str | Path) -> GatewayConfig:
    path = Path(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(str(path), exc)) from None
    if config.keys_file:
        keys_path = (path.parent / config.keys_file).resolve()
        extra = load_keys_file(keys_path) if keys_path.exists() else []
        for index, key in enumerate(extra):
            if key.tenant not in config.tenants:
                raise ConfigError(f"{keys_path}: keys[{index}].tenant: {key.tenant!r} is not a tenant")
            if key.workflow is not None and key.workflow not in config.workflow_names:
                raise ConfigError(
                    f"{keys_path}: keys[{index}].workflow: {key.workflow!r} is not in routing.workflows"
                )
        config = config.model_copy(update={"keys": [*config.keys, *extra]})
    if config.policy is not None:
        config = config.model_copy(update={"policy": _resolve_policy_dir(config.policy, path)})
    return config


def _resolve_policy_dir(policy: PolicyConfig, config_path: Path) -> PolicyConfig:
    directory = config_path.parent / policy.dir
    if policy.engine == "rego" and not directory.is_dir():
        raise ConfigError(f"{config_path}: policy.dir: {directory} is not a directory")
    return policy.model_copy(update={"dir": str(directory)})


def load_keys_file(path: Path) -> list[KeyConfig]:
    data = _read_yaml(path)
    if data is None:
        return []
    try:
        return _KeysFile.model_validate(data).keys
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(str(path), exc)) from None


def config_path_from_env() -> str:
    return os.environ.get(CONFIG_ENV, DEFAULT_CONFIG_PATH)


def cache_dir_from_env() -> Path:
    given = os.environ.get(CACHE_DIR_ENV)
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "tollgate"


def metrics_dir_from_env() -> Path | None:
    value = os.environ.get(METRICS_DIR_ENV)
    return Path(value) if value else None
