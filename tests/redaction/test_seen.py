"""Long texts scanned before are answered from the catalog's table, exactly as a new scan
would answer, and the table is bounded and keeps no text."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.exchange import Endpoint
from gateway.policy.decision import RedactMode, RedactRules
from gateway.redaction.detector import Catalog
from gateway.redaction.entities import BUILTIN
from gateway.redaction.request import redact_request
from gateway.redaction.seen import MIN_CHARS, SeenTexts
from gateway.redaction.state import RedactionState
from tests.redaction.corpus import NEAR_MISSES, POSITIVES

FILLER = "the build log said nothing of note; retrying the step with the same inputs. "
VALUES = [value for cases in POSITIVES.values() for _, value in cases]
NEAR = [text for texts in NEAR_MISSES.values() for text in texts]


def long_text(seed: int, entities: bool = True) -> str:
    rnd = random.Random(seed)
    parts: list[str] = []
    while sum(map(len, parts)) < 3 * MIN_CHARS:
        roll = rnd.random()
        parts.append(
            rnd.choice(VALUES) if entities and roll < 0.15 else rnd.choice(NEAR) if roll < 0.3 else FILLER
        )
    return " ".join(parts)


class CountingScan:
    def __init__(self, catalog: Catalog, text: str, names: frozenset[str]) -> None:
        self.calls = 0
        self._catalog, self._text, self._names = catalog, text, names

    def __call__(self) -> list[Any]:
        self.calls += 1
        return self._catalog.find(self._text, self._names)


def test_a_long_text_seen_before_is_not_scanned_again() -> None:
    catalog = Catalog(BUILTIN)
    seen: SeenTexts[Any] = SeenTexts()
    text = long_text(1)
    scan = CountingScan(catalog, text, catalog.names)
    first = seen.find(text, catalog.names, scan)
    again = seen.find(str(text), catalog.names, scan)  # an equal text, another object
    assert first and list(again) == list(first) == catalog.find(text, catalog.names)
    assert scan.calls == 1
    assert (seen.hits, seen.misses) == (1, 1)


def test_one_character_changed_is_a_new_text() -> None:
    catalog = Catalog(BUILTIN)
    seen: SeenTexts[Any] = SeenTexts()
    text = long_text(2)
    seen.find(text, catalog.names, lambda: catalog.find(text, catalog.names))
    changed = text[:100] + "x" + text[101:]
    scan = CountingScan(catalog, changed, catalog.names)
    assert list(seen.find(changed, catalog.names, scan)) == catalog.find(changed, catalog.names)
    assert scan.calls == 1


def test_other_kinds_are_another_entry() -> None:
    catalog = Catalog(BUILTIN)
    seen: SeenTexts[Any] = SeenTexts()
    text = "reach jane.doe@example.com or pay with 4111 1111 1111 1111. " + FILLER * 10
    emails = frozenset({"EMAIL"})
    cards = frozenset({"CREDIT_CARD"})
    found_emails = seen.find(text, emails, lambda: catalog.find(text, emails))
    found_cards = seen.find(text, cards, lambda: catalog.find(text, cards))
    assert [f.kind for f in found_emails] == ["EMAIL"]
    assert [f.kind for f in found_cards] == ["CREDIT_CARD"]
    assert seen.misses == 2


def test_short_texts_are_scanned_every_time_and_never_kept() -> None:
    catalog = Catalog(BUILTIN)
    seen: SeenTexts[Any] = SeenTexts()
    text = "mail jane.doe@example.com"
    scan = CountingScan(catalog, text, catalog.names)
    for _ in range(3):
        assert [f.kind for f in seen.find(text, catalog.names, scan)] == ["EMAIL"]
    assert scan.calls == 3
    assert len(seen) == 0


def test_the_table_is_bounded_and_forgets_the_least_recently_used() -> None:
    seen: SeenTexts[int] = SeenTexts(min_chars=1, max_entries=3)
    names = frozenset({"X"})
    for text in ("a", "b", "c"):
        seen.find(text, names, lambda: [1])
    seen.find("a", names, lambda: [2])  # a hit: "a" is now the most recently used
    seen.find("d", names, lambda: [3])  # "b" goes
    assert len(seen) == 3
    assert list(seen.find("a", names, lambda: [9])) == [1]
    assert list(seen.find("b", names, lambda: [9])) == [9]


def test_the_table_keeps_digests_and_positions_never_text() -> None:
    catalog = Catalog(BUILTIN)
    text = "card 4111 1111 1111 1111 on file. " + FILLER * 10
    catalog.detector().find_remembered(text)
    kept = repr(catalog.seen._table)
    assert "4111" not in kept and "card" not in kept and "build log" not in kept


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=0, max_value=10_000), st.sampled_from([None, ["EMAIL"], ["CREDIT_CARD", "API_KEY"]])
)
def test_a_remembered_answer_is_the_answer_a_new_scan_gives(seed: int, names: list[str] | None) -> None:
    catalog = Catalog(BUILTIN)
    text = long_text(seed)
    detector = catalog.detector(names)
    first = list(detector.find_remembered(text))
    again = list(catalog.detector(names, per_request=True).find_remembered(text))
    assert first == again == catalog.detector(names).find(text)


def conversation(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": long_text(0, entities=False)}]
    for turn in range(turns):
        messages.append({"role": "user", "content": long_text(100 + turn)})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{turn}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "' + long_text(200 + turn) + '"}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": long_text(300 + turn)})
    return {"model": "m", "messages": messages}


def redacted(
    catalog: Catalog, body: dict[str, Any], mode: RedactMode
) -> tuple[dict[str, Any], RedactionState]:
    fresh = copy.deepcopy(body)
    state = RedactionState(RedactRules(mode, "off"), catalog.detector(per_request=True), False)
    redact_request(Endpoint.CHAT, fresh, state, False)
    return fresh, state


@pytest.mark.parametrize("mode", ["mask", "tokenize"])
def test_an_agent_sessions_turns_are_redacted_as_if_every_text_were_new(mode: RedactMode) -> None:
    remembering = Catalog(BUILTIN)
    forgetting = Catalog(BUILTIN)
    forgetting.seen = SeenTexts(min_chars=10**9)  # remembers nothing
    for turns in range(1, 5):
        body = conversation(turns)
        with_table, state = redacted(remembering, body, mode)
        without, expected = redacted(forgetting, body, mode)
        assert with_table == without
        assert state.found == expected.found and state.found
        if mode == "tokenize":
            assert state.vault is not None and expected.vault is not None
            assert len(state.vault) == len(expected.vault) > 0
    # Each turn scanned only what was new: the system text once, then 3 texts per turn; the
    # later turns found the system text and the earlier turns' texts remembered.
    assert remembering.seen.misses == 1 + 3 * 4
    assert remembering.seen.hits == 3 + 3 * (0 + 1 + 2 + 3)
