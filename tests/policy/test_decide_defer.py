"""The decide stage and `defer`, with the embedded engine and a policy that always defers:
the gateway honours it for background requests only, refuses a synchronous one with 429
`deferred` (the policy's Retry-After, else the throttle pause's), lets a job's submission
through, and records the deferral; the input carries the capacity and async facts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.policy.compiled import compile_revision
from adapters.policy.rego import RegoEngine
from adapters.policy.source import read_policy_dir
from gateway.errors import PermissionDenied
from gateway.policy.defer import Deferred
from gateway.stages.decide import Decide
from tests.policy.conftest import ENTRYPOINT, policy_config
from tests.policy.test_decide import UPSTREAMS, ListSink, exchange

ALWAYS_DEFER = """package gateway.authz
default retry := null
retry := data.retry_after_s
decision := {"allow": true, "defer": true, "retry_after_s": retry}
"""


async def engine_for(tmp_path: Path, policy: str, data: str = "") -> RegoEngine:
    (tmp_path / "p.rego").write_text(policy)
    if data:
        (tmp_path / "data.yaml").write_text(data)
    return RegoEngine(
        compile_revision(read_policy_dir(tmp_path), ENTRYPOINT), policy_config(dir=str(tmp_path))
    )


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[RegoEngine]:
    made = await engine_for(tmp_path, ALWAYS_DEFER, "retry_after_s: 7\n")
    try:
        yield made
    finally:
        await made.aclose()


def stage(engine: RegoEngine, sink: ListSink, throttled_for: float = 0.0) -> Decide:
    return Decide(engine, UPSTREAMS, cache=None, audit=sink, timeout_s=5, throttled_for=lambda: throttled_for)


async def test_a_synchronous_background_request_is_refused_with_429_deferred(engine: RegoEngine) -> None:
    sink = ListSink()
    ex = exchange()
    ex.priority = "background"
    with pytest.raises(Deferred) as refused:
        await stage(engine, sink, throttled_for=1.5)(ex)
    assert refused.value.status == 429 and refused.value.code == "deferred"
    assert refused.value.headers["retry-after"] == "7"  # the policy's word
    assert "Prefer: respond-async" in refused.value.message  # this gateway takes jobs
    [record] = sink.records
    assert record["deferred"] is True
    assert record["input"]["capacity"] == "throttled" and record["input"]["async"] is False


async def test_normal_and_critical_requests_are_not_deferred_whatever_the_policy_says(
    engine: RegoEngine,
) -> None:
    for priority in ("normal", "critical"):
        sink = ListSink()
        ex = exchange()
        ex.priority = priority
        await stage(engine, sink)(ex)
        assert ex.decision is not None and ex.decision.defer
        assert sink.records[0]["deferred"] is False and sink.records[0]["input"]["capacity"] == "ok"


async def test_a_jobs_submission_goes_on_to_be_stored(engine: RegoEngine) -> None:
    sink = ListSink()
    ex = exchange()
    ex.priority, ex.job_id = "background", "job_123"
    await stage(engine, sink, throttled_for=3)(ex)  # no refusal: the job is the deferral
    [record] = sink.records
    assert record["deferred"] is True and record["input"]["async"] is True


async def test_without_the_policys_retry_after_the_throttle_pause_is_waited_out(tmp_path: Path) -> None:
    engine = await engine_for(tmp_path, ALWAYS_DEFER)
    try:
        for throttled_for, expected in ((2.2, "3"), (0.0, "60")):
            ex = exchange()
            ex.priority = "background"
            with pytest.raises(Deferred) as refused:
                await stage(engine, ListSink(), throttled_for)(ex)
            assert refused.value.headers["retry-after"] == expected
        ex = exchange()
        ex.priority = "background"
        without_jobs = Decide(engine, UPSTREAMS, cache=None, audit=None, timeout_s=5)
        with pytest.raises(Deferred) as refused:
            await without_jobs(ex)
        assert refused.value.headers["retry-after"] == "60"
        assert "respond-async" not in refused.value.message  # no jobs here: not offered
    finally:
        await engine.aclose()


async def test_a_defer_that_is_not_a_boolean_is_a_deny(tmp_path: Path) -> None:
    engine = await engine_for(
        tmp_path, 'package gateway.authz\ndecision := {"allow": true, "defer": "yes"}\n'
    )
    try:
        ex = exchange()
        ex.priority = "background"
        with pytest.raises(PermissionDenied, match="did not produce a decision"):
            await stage(engine, ListSink())(ex)
    finally:
        await engine.aclose()
