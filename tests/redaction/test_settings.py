"""Redaction settings from config: validation, per-tenant blocks, the scrubber's secrets,
and the stage doing nothing at all when both directions are off."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig, RedactionConfig
from gateway.exchange import Endpoint, Exchange, Principal, Tenant
from gateway.policy.decision import Decision, RedactRules
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN
from gateway.redaction.settings import RedactionSettings, configured_secrets, scrubber_for
from gateway.redaction.state import RedactionCounters
from gateway.stages.redact import Redact

BUILTIN_CATALOG = Catalog(BUILTIN)


def config(**redaction: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "upstreams": {
                "u": {
                    "kind": "openai_compat",
                    "base_url": "http://127.0.0.1:1/v1",
                    "api_key": "up-key-0123456",
                }
            },
            "models": {"m": [{"upstream": "u", "model": "x"}]},
            "tenants": {
                "plain": {},
                "own": {"redaction": {"request": "tokenize", "patterns": {"TICKET": r"TCK-\d{4}"}}},
            },
            "redaction": redaction,
        }
    )


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"request": "scramble"}, "request"),
        ({"entities": ["EMAIL", "PASSPORT"]}, "PASSPORT"),
        ({"patterns": {"EMAIL": "x"}}, "EMAIL"),
        ({"patterns": {"lower": "x"}}, "lower"),
        ({"patterns": {"BAD": "("}}, "patterns.BAD"),
    ],
)
def test_invalid_redaction_config_is_refused_with_its_key(block: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RedactionConfig.model_validate(block)


def test_a_tenant_block_replaces_the_default() -> None:
    settings = RedactionSettings.from_config(config(request="mask", entities=["EMAIL"]), BUILTIN_CATALOG)
    assert settings.for_tenant("plain").rules == RedactRules("mask", "off", ("EMAIL",))
    assert settings.for_tenant("unknown").rules == RedactRules("mask", "off", ("EMAIL",))
    own = settings.for_tenant("own")
    assert own.rules == RedactRules("tokenize", "off", ())
    assert [f.kind for f in own.detector(["TICKET"]).find("see TCK-1234")] == ["TICKET"]
    assert settings.for_tenant("plain").catalog is BUILTIN_CATALOG


def test_the_scrubber_knows_configured_credentials_and_every_custom_kind() -> None:
    cfg = config()
    assert configured_secrets(cfg) == ["up-key-0123456"]
    scrubber = scrubber_for(cfg, BUILTIN_CATALOG)
    assert scrubber.text("key up-key-0123456, ticket TCK-1234") == "key [SECRET], ticket [TICKET]"


def test_the_request_id_key_is_a_configured_credential() -> None:
    cfg = GatewayConfig.model_validate(
        {**config().model_dump(by_alias=True), "server": {"request_id_key": "rid-key-0123456789"}}
    )
    assert configured_secrets(cfg) == ["rid-key-0123456789", "up-key-0123456"]
    assert scrubber_for(cfg, BUILTIN_CATALOG).text("k=rid-key-0123456789") == "k=[SECRET]"


def _exchange(tenant: str, decision: Decision | None = None) -> Exchange:
    exchange = Exchange("r1", Endpoint.CHAT, 0.0, 1.0, {}, b"")
    exchange.principal = Principal(Tenant(tenant), "k")
    exchange.body = {"model": "m", "messages": [{"role": "user", "content": "mail jane@example.com"}]}
    exchange.decision = decision
    return exchange


async def test_off_in_both_directions_leaves_no_state() -> None:
    counters = RedactionCounters()
    stage = Redact(RedactionSettings.from_config(config(), BUILTIN_CATALOG), counters)
    exchange = _exchange("plain")
    await stage(exchange)
    assert exchange.redaction is None
    assert exchange.body["messages"][0]["content"] == "mail jane@example.com"
    assert counters.requests == 0


async def test_the_decision_overrides_config() -> None:
    counters = RedactionCounters()
    stage = Redact(RedactionSettings.from_config(config(request="mask"), BUILTIN_CATALOG), counters)
    exchange = _exchange("plain", Decision(allow=True, redact=RedactRules("off", "off")))
    await stage(exchange)
    assert exchange.redaction is None
    exchange = _exchange("plain", Decision(allow=True, redact=RedactRules("mask", "off", ("PII",))))
    await stage(exchange)
    assert exchange.body["messages"][0]["content"] == "mail [EMAIL]"
    assert counters.as_dict()["entities"] == {"EMAIL": 1}
