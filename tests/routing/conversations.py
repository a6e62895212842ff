"""Multi-turn conversations for the affinity tests, and what a perfect router would hit."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from simulator.tokens import block_keys, count_bytes_tokens

BLOCK_TOKENS = 16  # the simulator's default prefix-cache block


@dataclass
class Conversation:
    """One agent session: a distinct opening, then turns that each append to the history."""

    name: str
    messages: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def new(cls, label: str) -> Conversation:
        tag = uuid.uuid4().hex
        system = f"You are agent {label}-{tag}. " + "Follow the house rules carefully. " * 12
        return cls(f"{label}-{tag}", [{"role": "system", "content": system}])

    def ask(self, turn: int) -> list[dict[str, Any]]:
        self.messages.append({"role": "user", "content": f"Step {turn}: " + "do the next thing. " * 8})
        return list(self.messages)

    def answered(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


def ideal_cached_tokens(prompts: list[list[dict[str, Any]]]) -> tuple[int, int]:
    """(cached, prompt) tokens over one conversation's turns when every turn finds all the
    earlier ones in its replica's cache: the simulator's own block arithmetic (a turn leaves
    its answer's blocks cached too: the conversation up to the next user message)."""
    cached = prompt = 0
    seen: set[int] = set()
    for number, messages in enumerate(prompts):
        if number:
            seen.update(block_keys(orjson.dumps(messages[:-1]), BLOCK_TOKENS))
        data = orjson.dumps(messages)
        prompt += count_bytes_tokens(data)
        keys = block_keys(data, BLOCK_TOKENS)
        hits = 0
        for key in keys:
            if key not in seen:
                break
            hits += 1
        cached += hits * BLOCK_TOKENS
        seen.update(keys)
    return cached, prompt
