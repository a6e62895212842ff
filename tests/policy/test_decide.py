"""The decide stage with real engines: allow, deny, malformed answers, engine failures,
the decision record, the cache and the max_tokens cap."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from adapters.policy.compiled import compile_revision
from adapters.policy.opa import OpaEngine
from adapters.policy.rego import RegoEngine
from adapters.policy.source import read_policy_dir
from gateway.errors import NotFound, PermissionDenied, PolicyUnavailable
from gateway.exchange import Endpoint, Exchange, Principal, Tenant
from gateway.policy.cache import DecisionCache
from gateway.ports import PolicyEngine
from gateway.redaction.marks import Verbatim
from gateway.redaction.scrub import scrub_record
from gateway.stages.decide import Decide
from tests.policy.conftest import ENTRYPOINT, policy_config
from tests.policy.opa_server import OpaProtocolServer

DEMO = Principal(Tenant("demo"), "k-0123456789ab", "ci")
UPSTREAMS = {"kimi-k2.6": ["local"], "gpt-9": ["local"], "embeddings": ["local"]}


class ListSink:
    """An AuditSink that keeps what it is given (a fake at the port)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    async def append(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    async def aclose(self) -> None:
        pass


def exchange(model: str = "kimi-k2.6", principal: Principal = DEMO, **body: Any) -> Exchange:
    return Exchange(
        request_id="req-decide",
        endpoint=Endpoint.CHAT,
        received_at=0.0,
        deadline=30.0,
        headers={},
        raw_body=b"",
        body={"model": model, "messages": [{"role": "user", "content": "my secret text"}], **body},
        principal=principal,
        model_alias=model,
    )


def decide(
    engine: PolicyEngine, sink: ListSink | None = None, cache: bool = True, timeout_s: float = 5
) -> Decide:
    return Decide(
        engine, UPSTREAMS, cache=DecisionCache(100) if cache else None, audit=sink, timeout_s=timeout_s
    )


async def test_an_allowed_request_carries_its_decision_and_is_recorded(rego_engine: RegoEngine) -> None:
    sink = ListSink()
    ex = exchange()
    await decide(rego_engine, sink)(ex)
    assert ex.decision is not None and ex.decision.allow
    assert ex.decision.tools.allowed == frozenset({"fetch_url", "get_weather", "search"})
    [record] = sink.records
    assert record["type"] == "decision" and record["v"] == 1
    assert (record["request_id"], record["tenant"], record["key_id"]) == (
        "req-decide",
        "demo",
        "k-0123456789ab",
    )
    assert record["policy_revision"] == rego_engine.revision and record["engine"] == "rego"
    assert record["allow"] is True and record["decision"]["allow"] is True and record["cached"] is False
    assert record["input"]["request_id"] == "req-decide" and record["trace_id"] is None
    assert record["decision_id"] == ex.decision_id and record["latency_ms"] >= 0
    assert b"my secret text" not in orjson.dumps(record)


async def test_a_denied_request_is_refused_with_the_reasons_after_it_is_recorded(
    rego_engine: RegoEngine,
) -> None:
    sink = ListSink()
    with pytest.raises(PermissionDenied) as caught:
        await decide(rego_engine, sink)(exchange("gpt-9"))
    assert caught.value.status == 403 and caught.value.code == "policy_denied"
    assert caught.value.message == "Denied by policy: model gpt-9 is not allowed for tenant demo."
    assert [r["allow"] for r in sink.records] == [False]


async def test_an_unknown_tenant_is_denied(rego_engine: RegoEngine) -> None:
    stranger = Principal(Tenant("mallory"), "k-x")
    with pytest.raises(PermissionDenied, match="tenant mallory is not known"):
        await decide(rego_engine)(exchange(principal=stranger))


async def test_an_unknown_model_is_a_404_before_any_decision(rego_engine: RegoEngine) -> None:
    sink = ListSink()
    stage = decide(rego_engine, sink)
    with pytest.raises(NotFound) as caught:
        await stage(exchange("nope"))
    assert caught.value.code == "model_not_found"
    assert sink.records == [] and stage.counts.decisions == 0


async def test_the_same_shape_is_decided_once_then_served_from_the_cache(rego_engine: RegoEngine) -> None:
    sink = ListSink()
    stage = decide(rego_engine, sink)
    for _ in range(3):
        await stage(exchange())
    await stage(exchange(tools=[{"type": "function", "function": {"name": "search"}}]))
    assert [r["cached"] for r in sink.records] == [False, True, True, False]
    assert stage.counts.cache_hits == 2
    assert len({r["decision_id"] for r in sink.records}) == 4


async def test_without_a_cache_every_request_is_evaluated(rego_engine: RegoEngine) -> None:
    sink = ListSink()
    stage = decide(rego_engine, sink, cache=False)
    for _ in range(2):
        await stage(exchange())
    assert [r["cached"] for r in sink.records] == [False, False]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, {"max_tokens": 4096}),
        ({"max_tokens": 100_000}, {"max_tokens": 4096}),
        ({"max_tokens": 10}, {"max_tokens": 10}),
        ({"max_completion_tokens": 9000}, {"max_completion_tokens": 4096}),
    ],
)
async def test_max_tokens_is_capped_by_the_decision(
    rego_engine: RegoEngine, body: dict[str, Any], expected: dict[str, int]
) -> None:
    ex = exchange(**body)
    await decide(rego_engine)(ex)
    assert {k: ex.body[k] for k in ("max_tokens", "max_completion_tokens") if k in ex.body} == expected


@pytest.mark.parametrize(
    "answer",
    [{"allow": "yes"}, None, [], {"allow": True, "tools": {"on_violation": "explode"}}, {"reasons": []}],
)
async def test_a_malformed_decision_is_a_logged_deny(
    opa_engine: OpaEngine, opa: OpaProtocolServer, answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    opa.override_result(answer)
    sink = ListSink()
    stage = decide(opa_engine, sink)
    with caplog.at_level(logging.ERROR, logger="tollgate.policy"), pytest.raises(PermissionDenied) as caught:
        await stage(exchange())
    assert caught.value.message == "Denied by policy: the policy did not produce a decision."
    assert stage.counts.malformed == 1
    assert sink.records[0]["allow"] is False
    assert any(r.message == "malformed policy decision, denied" for r in caplog.records)


async def test_a_policy_that_answers_nonsense_in_process_is_denied_too(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text('package gateway.authz\ndecision := {"allow": "true"}\n')
    engine = RegoEngine(
        compile_revision(read_policy_dir(tmp_path), ENTRYPOINT), policy_config(dir=str(tmp_path))
    )
    try:
        with pytest.raises(PermissionDenied, match="did not produce a decision"):
            await decide(engine)(exchange())
    finally:
        await engine.aclose()


async def test_an_unreachable_opa_refuses_with_503_and_recovers(opa: OpaProtocolServer) -> None:
    engine = OpaEngine(policy_config(engine="opa", opa={"url": opa.url, "timeout_ms": 500}))
    stage = decide(engine)
    try:
        opa.stop()
        with pytest.raises(PolicyUnavailable) as caught:
            await stage(exchange())
        assert caught.value.status == 503 and caught.value.code == "policy_unavailable"
        assert "could not be reached" in caught.value.message
        opa.start(opa.port)
        await stage(exchange())
        assert stage.counts.unavailable == 1 and stage.counts.decisions == 1
    finally:
        if not opa.running:
            opa.start(opa.port)
        await engine.aclose()


async def test_a_slow_opa_refuses_with_503(opa: OpaProtocolServer) -> None:
    engine = OpaEngine(policy_config(engine="opa", opa={"url": opa.url, "timeout_ms": 100}))
    opa.delay_s = 1.0
    try:
        with pytest.raises(PolicyUnavailable, match="could not be reached"):
            await decide(engine)(exchange())
    finally:
        await engine.aclose()


async def test_the_stage_timeout_bounds_any_engine(opa: OpaProtocolServer) -> None:
    engine = OpaEngine(policy_config(engine="opa", opa={"url": opa.url, "timeout_ms": 5000}))
    opa.delay_s = 1.0
    try:
        with pytest.raises(PolicyUnavailable, match="did not answer within 100 ms"):
            await decide(engine, timeout_s=0.1)(exchange())
    finally:
        await engine.aclose()


async def test_an_opa_error_status_refuses_with_503(opa_engine: OpaEngine, opa: OpaProtocolServer) -> None:
    opa.fail_status = 500  # with OPA's error body: what it said reaches the message
    with pytest.raises(PolicyUnavailable, match=r"could not be evaluated \(injected failure\)"):
        await decide(opa_engine)(exchange())
    opa.fail_status = 503  # a server that is not evaluating at all: the status is what there is
    with pytest.raises(PolicyUnavailable, match="status 503"):
        await decide(opa_engine)(exchange())


async def test_opa_decisions_are_cached_only_with_a_ttl(opa: OpaProtocolServer) -> None:
    engine = OpaEngine(policy_config(engine="opa", opa={"url": opa.url}, cache={"ttl_s": 60}))
    sink = ListSink()
    stage = decide(engine, sink)
    try:
        before = opa.requests
        for _ in range(3):
            await stage(exchange())
        assert opa.requests - before == 1
        assert [r["cached"] for r in sink.records] == [False, True, True]
        assert sink.records[0]["policy_revision"].startswith("policies@")
    finally:
        await engine.aclose()


async def test_a_minted_decision_id_is_verbatim_whatever_its_digits(rego_engine: RegoEngine) -> None:
    ex = exchange()
    await decide(rego_engine, ListSink())(ex)
    assert isinstance(ex.decision_id, Verbatim) and len(ex.decision_id) == 32
    card_like = Verbatim("c9fed51bc05a4969242448027da63f2a")  # digits that pass the card check
    assert scrub_record({"decision_id": card_like}) == {"decision_id": "c9fed51bc05a4969242448027da63f2a"}


async def test_deny_reasons_are_given_in_one_canonical_order(tmp_path: Path) -> None:
    """Whatever order a policy lists its reasons in (the engines order strings and iterate
    sets differently), the refusal lists them by code point."""
    (tmp_path / "authz.rego").write_text(
        "package gateway.authz\n\n"
        'decision := {"allow": false, "reasons": ["tenant z", "model a", "éclair", "Zebra"]}\n'
    )
    engine = RegoEngine(compile_revision(read_policy_dir(tmp_path), ENTRYPOINT), policy_config())
    try:
        with pytest.raises(PermissionDenied) as caught:
            await decide(engine)(exchange())
    finally:
        await engine.aclose()
    assert caught.value.message == "Denied by policy: Zebra; model a; tenant z; éclair."


async def test_a_webhook_destination_decision_is_recorded_and_names_no_model(rego_engine: RegoEngine) -> None:
    sink = ListSink()
    stage = decide(rego_engine, sink)
    decision = await stage.for_webhooks("demo", DEMO, "req_register")
    assert decision.allow
    assert decision.destinations.webhook_url.allowed_hosts == ("*",)
    assert decision.destinations.webhook_url.allowed_schemes == ("https",)
    record = sink.records[-1]
    assert (record["request_id"], record["tenant"], record["key_id"]) == ("req_register", "demo", DEMO.key_id)
    assert record["input"]["endpoint"] == "webhooks" and record["input"]["model"] is None
    delivery = await stage.for_webhooks("demo", None, "whk_job_1_wh_1")  # a delivery: no caller
    assert delivery.allow and sink.records[-1]["key_id"] is None and sink.records[-1]["tenant"] == "demo"
    unknown = await stage.for_webhooks("mallory", None, "whk_job_2_wh_2")
    assert not unknown.allow and stage.counts.denied == 1
    assert sink.records[-1]["allow"] is False


async def test_a_webhook_destination_decision_fails_closed(
    opa_engine: OpaEngine, opa: OpaProtocolServer
) -> None:
    opa.fail_status = 503
    with pytest.raises(PolicyUnavailable):
        await decide(opa_engine).for_webhooks("demo", DEMO, "req_register")


def _ttl_engine(opa: OpaProtocolServer, timeout_ms: int = 5000) -> OpaEngine:
    """OPA with a decision cache: its answers may be shared."""
    return OpaEngine(
        policy_config(engine="opa", opa={"url": opa.url, "timeout_ms": timeout_ms}, cache={"ttl_s": 60})
    )


async def test_requests_arriving_while_their_input_is_evaluated_share_that_evaluation(
    opa: OpaProtocolServer,
) -> None:
    engine = _ttl_engine(opa)
    sink = ListSink()
    stage = decide(engine, sink)
    opa.delay_s = 0.2  # every request below arrives while the first is being evaluated
    try:
        before = opa.requests
        exchanges = [exchange() for _ in range(20)]
        await asyncio.gather(*(stage(ex) for ex in exchanges))
        assert opa.requests - before == 1
        assert all(ex.decision is not None and ex.decision.allow for ex in exchanges)
        assert sorted(r["cached"] for r in sink.records) == [False] + [True] * 19
        assert len({r["decision_id"] for r in sink.records}) == 20  # each request's own id
        assert stage.counts.shared == 19 and stage.counts.decisions == 20
        # Other inputs are each evaluated on their own.
        tools = [[{"type": "function", "function": {"name": name}}] for name in ("search", "fetch_url")]
        await asyncio.gather(*(stage(exchange(tools=offered)) for offered in tools))
        assert opa.requests - before == 3
    finally:
        await engine.aclose()


async def test_a_failed_evaluation_refuses_every_request_that_waited_for_it(opa: OpaProtocolServer) -> None:
    engine = _ttl_engine(opa, timeout_ms=150)
    stage = decide(engine)
    opa.delay_s = 1.0
    try:
        before = opa.requests
        outcomes = await asyncio.gather(*(stage(exchange()) for _ in range(5)), return_exceptions=True)
        assert all(isinstance(o, PolicyUnavailable) and o.status == 503 for o in outcomes)
        assert opa.requests - before == 1 and stage.counts.unavailable == 1
        opa.delay_s = 0.0  # the failure is not remembered: the next request is evaluated
        await stage(exchange())
        assert opa.requests - before == 2
    finally:
        await engine.aclose()


async def test_the_shared_evaluation_outlives_the_request_that_started_it(opa: OpaProtocolServer) -> None:
    engine = _ttl_engine(opa)
    stage = decide(engine)
    opa.delay_s = 0.2
    try:
        first = asyncio.ensure_future(stage(exchange()))
        await asyncio.sleep(0.05)
        second = exchange()
        waiting = asyncio.ensure_future(stage(second))
        await asyncio.sleep(0.05)
        first.cancel()  # its client went away
        await waiting
        assert second.decision is not None and second.decision.allow
        assert first.cancelled() and stage.counts.shared == 1
    finally:
        await engine.aclose()


async def test_without_a_cache_concurrent_requests_are_each_evaluated(opa: OpaProtocolServer) -> None:
    engine = OpaEngine(policy_config(engine="opa", opa={"url": opa.url}))  # no ttl: not cacheable
    stage = decide(engine)
    opa.delay_s = 0.1
    try:
        before = opa.requests
        await asyncio.gather(*(stage(exchange()) for _ in range(3)))
        assert opa.requests - before == 3 and stage.counts.shared == 0
    finally:
        await engine.aclose()
