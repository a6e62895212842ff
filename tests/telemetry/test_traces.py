"""Traces of real requests through a running gateway, as a real OTLP receiver gets them: the
span tree, GenAI attribute names and values, the trace id carried from client to upstream,
the request id everywhere, and no secret anywhere."""

from __future__ import annotations

import os
import uuid

import httpx
import openai

from simulator import RunningSimulator
from tests.harness import HELLO, eventually, recorded
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, running_gateway
from tests.telemetry.conftest import telemetry_block, traced_config
from tests.telemetry.receiver import OtlpReceiver, ReceivedSpan, otlp_grpc_receiver

# No metering here: Idempotency-Key is handled by its own stage, where the meter would be.
STAGES_WITHOUT_POLICY = [
    "admit",
    "label",
    "redact",
    "tool_offer",
    "image_destinations",
    "context_cap",
    "route",
    "idempotency",
]


def _traceparent(sampled: bool = True) -> tuple[str, str, str]:
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}", trace_id, span_id


def _trace(receiver: OtlpReceiver, trace_id: str, clients: int = 1) -> list[ReceivedSpan]:
    """The request's spans, once its server span and `clients` attempt spans have arrived."""

    def complete() -> bool:
        spans = receiver.received.spans_of(trace_id)
        return any(s.kind == "SERVER" for s in spans) and sum(s.kind == "CLIENT" for s in spans) >= clients

    assert eventually(complete, seconds=10), f"no complete trace {trace_id}"
    return receiver.received.spans_of(trace_id)


def _one(spans: list[ReceivedSpan], kind: str) -> ReceivedSpan:
    found = [s for s in spans if s.kind == kind]
    assert len(found) == 1, [s.name for s in found]
    return found[0]


def test_a_request_is_one_trace_from_the_client_span_to_the_upstream(
    traced_client: openai.OpenAI, receiver: OtlpReceiver, upstream: RunningSimulator, request_id: str
) -> None:
    header, trace_id, client_span = _traceparent()
    raw = traced_client.chat.completions.with_raw_response.create(
        model="chat",
        messages=HELLO,
        max_tokens=32,
        temperature=0.5,
        extra_headers={"traceparent": header, "x-request-id": request_id, "x-session-id": "conversation-42"},
    )
    assert raw.headers["x-request-id"] == request_id
    spans = _trace(receiver, trace_id)

    server = _one(spans, "SERVER")
    assert server.name == "POST /v1/chat/completions"
    assert server.parent_span_id == client_span
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["tollgate.tenant"] == "alpha"
    assert server.attributes["tollgate.model"] == "chat"
    assert server.attributes["tollgate.workflow"] == "tests"  # the key's label
    assert "tollgate.time_to_first_token" in server.attributes
    assert server.events == ["tollgate.first_token"]
    conversation = server.attributes["gen_ai.conversation.id"]
    assert "conversation-42" not in conversation  # scoped to the tenant and hashed
    assert server.resource["service.name"] == "tollgate-test"
    assert server.resource["deployment.environment.name"] == "test"

    stages = sorted((s for s in spans if s.kind == "INTERNAL"), key=lambda s: s.start_ns)
    assert [s.name for s in stages] == STAGES_WITHOUT_POLICY
    assert {s.parent_span_id for s in stages} == {server.span_id}

    attempt = _one(spans, "CLIENT")
    assert attempt.name == "chat sim-model"
    assert attempt.parent_span_id == server.span_id
    attributes = attempt.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "sim-model"
    assert attributes["gen_ai.request.max_tokens"] == 32
    assert attributes["gen_ai.request.temperature"] == 0.5
    assert attributes["gen_ai.response.model"] == "sim-model"
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes["gen_ai.conversation.id"] == conversation
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == int(upstream.openai_base_url(0).split(":")[2].split("/")[0])
    assert attributes["tollgate.upstream"] == "local"
    assert attributes["tollgate.attempt.kind"] == "first"
    usage = raw.parse().usage
    assert usage is not None
    assert attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert "gen_ai.usage.cache_read.input_tokens" in attributes
    assert attributes["tollgate.usage.source"] == "reported"  # not counted by the gateway
    assert "gen_ai.request.stream" not in attributes
    assert server.start_ns <= attempt.start_ns <= attempt.end_ns <= server.end_ns

    for span in spans:
        assert span.attributes["tollgate.request_id"] == request_id, span.name

    # The upstream got the attempt's span as its parent, and the id derived from the request id.
    [sent] = recorded(upstream, request_id)
    assert sent.headers["traceparent"] == f"00-{trace_id}-{attempt.span_id}-01"
    assert sent.headers["x-request-id"] == attempt.attributes["tollgate.upstream_request_id"]


def test_a_stream_records_its_time_to_first_chunk(
    traced_client: openai.OpenAI, receiver: OtlpReceiver, upstream: RunningSimulator, request_id: str
) -> None:
    header, trace_id, _ = _traceparent()
    chunks = list(
        traced_client.chat.completions.create(
            model="chat",
            messages=HELLO,
            stream=True,
            extra_headers={"traceparent": header, "x-request-id": request_id},
        )
    )
    assert chunks
    spans = _trace(receiver, trace_id)
    attempt = _one(spans, "CLIENT")
    assert attempt.attributes["gen_ai.request.stream"] is True
    assert attempt.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert attempt.attributes["gen_ai.usage.output_tokens"] > 0
    server = _one(spans, "SERVER")
    assert server.events == ["tollgate.first_token"]
    # The stream's attempt lasts to its last chunk, not to its first.
    assert (
        attempt.end_ns - attempt.start_ns >= attempt.attributes["gen_ai.response.time_to_first_chunk"] * 1e9
    )


def test_each_attempt_is_a_client_span_and_a_failed_one_says_why(
    traced_client: openai.OpenAI, receiver: OtlpReceiver, upstream: RunningSimulator, request_id: str
) -> None:
    upstream.faults.set({"status": 503, "message": "overloaded"}, count=1, replica=0)
    header, trace_id, _ = _traceparent()
    traced_client.chat.completions.create(
        model="failover", messages=HELLO, extra_headers={"traceparent": header, "x-request-id": request_id}
    )
    spans = _trace(receiver, trace_id, clients=2)
    first, second = sorted((s for s in spans if s.kind == "CLIENT"), key=lambda s: s.start_ns)
    assert first.status_code == 2  # error
    assert first.attributes["error.type"] == "upstream_unavailable"
    assert first.attributes["http.response.status_code"] == 503
    assert first.attributes["tollgate.attempt.kind"] == "first"
    assert second.status_code != 2
    assert second.attributes["tollgate.attempt.kind"] == "fallback"
    assert second.attributes["gen_ai.request.model"] == "backup-model"
    sent = recorded(upstream, request_id)
    assert [r.headers["traceparent"] for r in sent] == [
        f"00-{trace_id}-{first.span_id}-01",
        f"00-{trace_id}-{second.span_id}-01",
    ]


def test_a_retry_on_another_replica_is_marked_as_one(
    traced_client: openai.OpenAI, receiver: OtlpReceiver, upstream: RunningSimulator, request_id: str
) -> None:
    upstream.faults.set({"status": 503, "message": "overloaded"}, count=1)
    header, trace_id, _ = _traceparent()
    traced_client.chat.completions.create(
        model="pooled", messages=HELLO, extra_headers={"traceparent": header, "x-request-id": request_id}
    )
    spans = _trace(receiver, trace_id, clients=2)
    first, second = sorted((s for s in spans if s.kind == "CLIENT"), key=lambda s: s.start_ns)
    assert first.attributes["tollgate.attempt.kind"] == "first"
    assert second.attributes["tollgate.attempt.kind"] == "retry"
    assert first.attributes["tollgate.replica"] != second.attributes["tollgate.replica"]


def test_an_unsampled_parent_is_followed_and_its_trace_passed_on(
    traced_client: openai.OpenAI, receiver: OtlpReceiver, upstream: RunningSimulator, request_id: str
) -> None:
    header, trace_id, client_span = _traceparent(sampled=False)
    traced_client.chat.completions.create(
        model="chat", messages=HELLO, extra_headers={"traceparent": header, "x-request-id": request_id}
    )
    [sent] = recorded(upstream, request_id)
    version, sent_trace, parent, flags = sent.headers["traceparent"].split("-")
    assert (version, sent_trace, flags) == ("00", trace_id, "00")
    assert parent != client_span  # the gateway's own (unrecorded) span
    # Spans leave in order: once a later sampled request's trace is in, this one's would be too.
    later, later_trace, _ = _traceparent()
    traced_client.chat.completions.create(model="chat", messages=HELLO, extra_headers={"traceparent": later})
    _trace(receiver, later_trace)
    assert receiver.received.spans_of(trace_id) == []


def test_a_refused_request_has_a_trace_too(traced: RunningGateway, receiver: OtlpReceiver) -> None:
    request_id = f"refused-{uuid.uuid4().hex}"
    response = httpx.post(
        traced.base_url + "/chat/completions",
        json={"model": "chat", "messages": HELLO},
        headers={"authorization": "Bearer not-a-key", "x-request-id": request_id},
    )
    assert response.status_code == 401
    assert eventually(lambda: bool(receiver.received.with_attribute("tollgate.request_id", request_id)), 10)
    assert eventually(
        lambda: any(
            s.kind == "SERVER" for s in receiver.received.with_attribute("tollgate.request_id", request_id)
        )
    )
    spans = receiver.received.with_attribute("tollgate.request_id", request_id)
    server = _one(spans, "SERVER")
    assert server.attributes["error.type"] == "invalid_api_key"
    assert server.attributes["http.response.status_code"] == 401
    assert server.status_code != 2  # a client's error is not the server's
    admit = next(s for s in spans if s.name == "admit")
    assert admit.status_code == 2
    assert admit.attributes["error.type"] == "invalid_api_key"


SECRETS = {
    "email": "jane.doe@example.org",
    "card": "4111 1111 1111 1111",
    "api_key": "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz",
    "password": "hunter2-correct-horse",
    "session": "session-raw-7f3a9",
}


def test_no_secret_reaches_any_span_or_metric(
    traced: RunningGateway, traced_client: openai.OpenAI, receiver: OtlpReceiver, request_id: str
) -> None:
    text = (
        f"My email is {SECRETS['email']}, card {SECRETS['card']}, key {SECRETS['api_key']}, "
        f"password {SECRETS['password']}."
    )
    header, trace_id, _ = _traceparent()
    tools: list[dict[str, object]] = [
        {"type": "function", "function": {"name": "login", "parameters": {"type": "object"}}}
    ]
    traced_client.chat.completions.create(
        model="chat",
        messages=[
            {"role": "system", "content": f"Secret: {SECRETS['password']}"},
            {"role": "user", "content": text},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "login",
                            "arguments": f'{{"password": "{SECRETS["password"]}"}}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": f"token {SECRETS['api_key']}"},
        ],
        tools=tools,  # type: ignore[arg-type]
        extra_headers={
            "traceparent": header,
            "x-request-id": request_id,
            "x-session-id": SECRETS["session"],
            "x-workflow": SECRETS["api_key"],  # not a well-formed workflow: counted as "other"
        },
        extra_body={"x_sim": {"echo": True}},  # the answer repeats the prompt
    )
    _trace(receiver, trace_id)
    page = httpx.get(traced.url + "/metrics").text
    assert eventually(lambda: bool(receiver.received.metrics), 10)
    with receiver.received.lock:
        exported = b"".join(receiver.received.raw)
    for name, secret in {**SECRETS, "key": TEST_KEY, "upstream_key": UPSTREAM_KEY}.items():
        assert secret.encode() not in exported, name
        assert secret not in page, name


def test_spans_and_metrics_go_over_grpc_too(upstream_sim: RunningSimulator, request_id: str) -> None:
    with otlp_grpc_receiver() as grpc_receiver:
        telemetry = telemetry_block(grpc_receiver.endpoint)
        telemetry["traces"]["otlp"]["protocol"] = "grpc"
        telemetry["metrics"]["otlp"]["protocol"] = "grpc"
        with (
            running_gateway(traced_config(upstream_sim, telemetry)) as gateway,
            openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client,
        ):
            header, trace_id, _ = _traceparent()
            client.chat.completions.create(
                model="chat",
                messages=HELLO,
                extra_headers={"traceparent": header, "x-request-id": request_id},
            )
            spans = _trace(grpc_receiver, trace_id)
            assert {s.kind for s in spans} == {"SERVER", "INTERNAL", "CLIENT"}
            assert all(s.attributes["tollgate.request_id"] == request_id for s in spans)
            assert eventually(
                lambda: "gen_ai.client.operation.duration" in grpc_receiver.received.metric_names(), 10
            )


def test_a_request_id_the_client_chose_is_scrubbed_on_spans_as_in_logs(
    traced_client: openai.OpenAI, receiver: OtlpReceiver
) -> None:
    secret = (
        "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" + "T3BlbkFJ" + "Qa7sDf0gHj3kLz"
    )  # well-formed as an id
    header, trace_id, _ = _traceparent()
    raw = traced_client.chat.completions.with_raw_response.create(
        model="chat", messages=HELLO, extra_headers={"traceparent": header, "x-request-id": secret}
    )
    assert raw.headers["x-request-id"] == secret  # the client's own id comes back to the client
    spans = _trace(receiver, trace_id)
    assert spans
    for span in spans:
        assert secret not in span.attributes["tollgate.request_id"], span.name
        assert "[OPENAI_API_KEY]" in span.attributes["tollgate.request_id"]
