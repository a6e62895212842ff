"""Session settings for one request: config (top level, tenant, key, workflow) under the
policy decision; the decision's `session` object parsed strictly; the policy's bands."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import GatewayConfig, StateConfig
from gateway.exchange import Principal, Tenant
from gateway.keys import hash_key, key_id
from gateway.metering.parts import state_config
from gateway.policy.decision import MalformedDecision, parse_decision
from gateway.sessions.bands import NO_SESSION, session_bands
from gateway.sessions.records import SessionRecord
from gateway.sessions.rules import NO_RULES, SessionLimits, SessionRules
from gateway.sessions.settings import SessionSettings

KEY = "tg-test-session-key"


def config(**sessions: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "upstreams": {"u": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
            "models": {"chat": [{"upstream": "u", "model": "m"}], "cheap": [{"upstream": "u", "model": "m"}]},
            "tenants": {
                "acme": {
                    "sessions": {
                        "limits": {"max_usd": 5},
                        "checkpoints": {"mode": "advise", "every_turns": 10},
                    }
                },
                "other": {},
            },
            "keys": [{"tenant": "acme", "hash": hash_key(KEY), "session_limits": {"max_tokens": 1000}}],
            "sessions": {
                "limits": {"max_tokens": 50_000, "max_input_tokens": 8000},
                "checkpoints": {"mode": "compact", "every_turns": 8, "summarizer": "cheap"},
                "workflows": {"review": {"mode": "advise", "above_tokens": 4000}},
                **sessions,
            },
        }
    )


def principal(tenant: str, key: str | None = None) -> Principal:
    return Principal(Tenant(tenant), key_id(hash_key(key)) if key else "k-none")


def test_limits_go_from_the_top_level_to_the_tenant_to_the_key_to_the_decision() -> None:
    settings = SessionSettings(config())
    assert settings.limits(principal("other"), NO_RULES) == SessionLimits(50_000, None, 8000)
    assert settings.limits(principal("acme"), NO_RULES) == SessionLimits(50_000, 5_000_000, 8000)
    assert settings.limits(principal("acme", KEY), NO_RULES) == SessionLimits(1000, 5_000_000, 8000)
    decided = SessionRules(max_micros=1_000_000, max_input_tokens=100)
    assert settings.limits(principal("acme", KEY), decided) == SessionLimits(1000, 1_000_000, 100)


def test_checkpoints_go_from_the_top_level_to_the_tenant_to_the_workflow_to_the_decision() -> None:
    settings = SessionSettings(config())
    top = settings.checkpoints(principal("other"), "", NO_RULES)
    assert top is not None
    assert (top.mode, top.every_turns, top.summarizer) == ("compact", 8, "cheap")
    tenant = settings.checkpoints(principal("acme"), "", NO_RULES)
    assert tenant is not None
    assert (tenant.mode, tenant.every_turns) == ("advise", 10)
    workflow = settings.checkpoints(principal("acme"), "review", NO_RULES)
    assert workflow is not None
    assert (workflow.mode, workflow.every_turns, workflow.above_tokens) == ("advise", None, 4000)
    assert settings.checkpoints(principal("acme"), "", SessionRules(checkpoint_mode="off")) is None
    decided = settings.checkpoints(
        principal("acme"), "", SessionRules(checkpoint_mode="compact", every_turns=3)
    )
    assert decided is not None
    assert (decided.mode, decided.every_turns, decided.summarizer) == ("compact", 3, "cheap")


def test_a_requests_settings_are_the_limits_and_plan_whichever_order_requests_come_in() -> None:
    settings = SessionSettings(config())
    decided = SessionRules(max_tokens=5, checkpoint_mode="off")
    asked = [
        (principal("other"), "", NO_RULES),
        (principal("acme"), "", NO_RULES),
        (principal("acme", KEY), "", NO_RULES),
        (principal("acme"), "review", NO_RULES),
        (principal("acme", KEY), "review", decided),
        (principal("acme"), "", decided),
    ]
    for _ in range(2):  # the second time from what the first kept
        for who, workflow, rules in asked:
            limits, plan = settings.for_request(who, workflow, rules)
            assert limits == settings.limits(who, rules)
            assert plan == settings.checkpoints(who, workflow, rules)
    # Equal rules in another object (a decision not from the cache) get the same answer.
    equal = SessionRules(max_tokens=5, checkpoint_mode="off")
    limits, plan = settings.for_request(principal("acme", KEY), "", equal)
    assert (limits, plan) == (SessionLimits(5, 5_000_000, 8000), None)
    assert limits.capped and not SessionLimits(max_input_tokens=10).capped


def test_a_decisions_session_object_is_parsed_strictly() -> None:
    decision = parse_decision(
        {
            "allow": True,
            "session": {"max_tokens": 10, "max_usd": 1.5, "checkpoint": {"mode": "advise", "every_turns": 4}},
        }
    )
    assert decision.session == SessionRules(10, 1_500_000, None, "advise", 4, None)
    assert parse_decision({"allow": True}).session == NO_RULES
    for bad in (
        {"max_tokens": 0},
        {"max_usd": "5"},
        {"checkpoint": {"mode": "summarize"}},
        {"checkpoint": []},
        [],
    ):
        with pytest.raises(MalformedDecision):
            parse_decision({"allow": True, "session": bad})


def test_caps_in_the_config_turn_metering_on() -> None:
    assert state_config(config()) == StateConfig()
    uncapped = config(limits={"max_input_tokens": 100})
    plain = uncapped.model_copy(
        update={
            "keys": [],
            "tenants": {"acme": uncapped.tenants["other"], "other": uncapped.tenants["other"]},
        }
    )
    assert state_config(plain) is None


def test_a_compact_summarizer_must_be_a_model_alias() -> None:
    with pytest.raises(ValueError, match="summarizer 'nope' is not a model alias"):
        config(checkpoints={"mode": "compact", "every_turns": 2, "summarizer": "nope"})


def test_bands_are_coarse() -> None:
    assert session_bands(None) == NO_SESSION
    record = SessionRecord(
        "acme",
        "k",
        0,
        0,
        40,
        150_000,
        0,
        5_000,
        2_500_000,
        1_000,
        9_000,
        200,
        "",
        "",
        0,
        "",
        (),
        0,
        "",
        0,
        (),
    )
    assert session_bands(record) == {
        "turns": "32-63",
        "tokens": "100k-1M",
        "spend": "$1-$10",
        "growth": "<1k",
    }
