"""The prompt family: the session key of a conversation that named none."""

from __future__ import annotations

import re

from gateway.routing.fingerprint import prompt_family_key

SYSTEM: dict[str, object] = {"role": "system", "content": "You are a careful coding agent."}
USER: dict[str, object] = {"role": "user", "content": "Fix the failing test in parser.py"}


def _turns() -> list[list[dict[str, object]]]:
    history: list[dict[str, object]] = [SYSTEM, USER]
    turns = [list(history)]
    for n in range(4):
        history += [{"role": "assistant", "content": f"step {n}"}, {"role": "user", "content": f"ok {n}"}]
        turns.append(list(history))
    return turns


def test_every_turn_of_a_conversation_has_the_same_key() -> None:
    keys = {prompt_family_key("acme", {"messages": turn}) for turn in _turns()}
    assert len(keys) == 1
    [key] = keys
    assert key is not None
    assert re.fullmatch(r"[0-9a-f]{32}", key)


def test_the_key_is_scoped_to_the_tenant() -> None:
    body = {"messages": [SYSTEM, USER]}
    assert prompt_family_key("acme", body) != prompt_family_key("globex", body)


def test_a_different_opening_is_a_different_family() -> None:
    base = prompt_family_key("acme", {"messages": [SYSTEM, USER]})
    assert prompt_family_key("acme", {"messages": [SYSTEM, {**USER, "content": "other"}]}) != base
    assert prompt_family_key("acme", {"messages": [{**SYSTEM, "content": "x"}, USER]}) != base
    assert prompt_family_key("acme", {"messages": [USER]}) != base


def test_content_parts_are_canonical() -> None:
    one = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    two = {"content": [{"text": "hi", "type": "text"}], "role": "user"}
    assert prompt_family_key("acme", {"messages": [one]}) == prompt_family_key("acme", {"messages": [two]})


def test_nothing_to_fingerprint() -> None:
    assert prompt_family_key("acme", {"input": "embed me"}) is None
    assert prompt_family_key("acme", {"messages": []}) is None
    assert prompt_family_key("acme", {"messages": [{"role": "assistant", "content": "hi"}]}) is None
    assert prompt_family_key("acme", {"messages": ["not an object"]}) is None
