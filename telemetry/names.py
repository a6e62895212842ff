"""Attribute names: OpenTelemetry semantic conventions v1.41.0 (GenAI, HTTP, server, error),
and the gateway's own under `tollgate.`.

The GenAI conventions are still "Development" and moving (a newer repository renames some of
them); every name the gateway emits is here, so following them is a one-file change.
"""

from __future__ import annotations

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
SCOPE = "tollgate"

# GenAI (gen-ai-spans.md, gen-ai-metrics.md)
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_OUTPUT_TYPE = "gen_ai.output.type"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"  # noqa: S105 (an attribute name)

# HTTP, server, error
HTTP_REQUEST_METHOD = "http.request.method"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
HTTP_ROUTE = "http.route"
URL_PATH = "url.path"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

# Resource
SERVICE_NAME = "service.name"
SERVICE_VERSION = "service.version"
SERVICE_INSTANCE_ID = "service.instance.id"

# The gateway's own
# Also the key to find a trace in Tempo: { span.tollgate.request_id = "..." }
REQUEST_ID = "tollgate.request_id"
UPSTREAM_REQUEST_ID = "tollgate.upstream_request_id"  # on attempt spans: the id the upstream was sent
TENANT = "tollgate.tenant"
KEY_ID = "tollgate.key_id"  # a fingerprint of the key's hash, never the key
MODEL_ALIAS = "tollgate.model"
WORKFLOW = "tollgate.workflow"
API = "tollgate.api"  # the client API a request came through: chat.completions, responses, messages, ...
PROMPT_FAMILY = "tollgate.prompt_family"
UPSTREAM = "tollgate.upstream"
REPLICA = "tollgate.replica"
USAGE_SOURCE = "tollgate.usage.source"  # reported (by the upstream) | counted (by the gateway)
ATTEMPT = "tollgate.attempt"  # 0 for the first attempt of a request
ATTEMPT_KIND = "tollgate.attempt.kind"  # first | retry (same upstream) | fallback (another)
DECISION_ID = "tollgate.decision.id"
DECISION_ALLOW = "tollgate.decision.allow"
POLICY_REVISION = "tollgate.policy.revision"
TOOL_CALLS_BLOCKED = "tollgate.tool_calls.blocked"
# Seconds from receipt to the first byte sent.
TIME_TO_FIRST_TOKEN = "tollgate.time_to_first_token"  # noqa: S105 (an attribute name)
FIRST_TOKEN_EVENT = "tollgate.first_token"  # noqa: S105 (an event name)
