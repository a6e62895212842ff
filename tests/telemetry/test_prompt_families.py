"""Named prompt families: a configured name for a system prompt's digest, or an
x-prompt-family header naming a configured family; anything else has no name."""

from __future__ import annotations

import hashlib
from typing import Any

from gateway.exchange import Endpoint, Exchange
from telemetry.labels import PromptFamilyNames

SUPPORT = "You are the support assistant of Example Corp."


def exchange(body: dict[str, Any], headers: dict[str, str] | None = None) -> Exchange:
    return Exchange("r", Endpoint.CHAT, 0.0, 30.0, headers or {}, b"", body=body)


def chat(system: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
    }


FAMILIES = PromptFamilyNames(
    {"support": hashlib.sha256(SUPPORT.encode()).hexdigest()[:16], "triage": "0123456789abcdef0123"}
)


def test_a_system_prompt_with_a_configured_digest_gets_its_name() -> None:
    assert FAMILIES.name(exchange(chat(SUPPORT))) == "support"
    assert FAMILIES.name(exchange(chat([{"type": "text", "text": SUPPORT}]))) == "support"


def test_a_header_names_only_a_configured_family() -> None:
    assert FAMILIES.name(exchange(chat("anything"), {"x-prompt-family": "triage"})) == "triage"
    assert FAMILIES.name(exchange(chat("anything"), {"x-prompt-family": "made-up"})) is None


def test_an_unnamed_prompt_and_no_system_prompt_have_no_name() -> None:
    assert FAMILIES.name(exchange(chat(SUPPORT + " "))) is None
    assert FAMILIES.name(exchange({"model": "m", "messages": [{"role": "user", "content": SUPPORT}]})) is None
    assert PromptFamilyNames({}).name(exchange(chat(SUPPORT))) is None
