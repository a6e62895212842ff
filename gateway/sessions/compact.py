"""Compaction's arithmetic on a message list: which prefix a checkpoint stands for, and the
request the upstream gets with the summary in that prefix's place.

A checkpoint replaces the first `n` messages, system messages at the head excepted (they stay
verbatim), by one system message carrying the summary. Summaries accumulate: a later
checkpoint's summary is the earlier one with the new part's appended, so the text the
upstream sees grows only at its end and its prefix cache keeps hitting across checkpoints.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from gateway.sessions.records import Checkpoint

SUMMARY_INTRO = "Summary of the earlier part of this conversation:\n"
SUMMARIZE = (
    "Summarize the conversation above in at most {words} words for your own later use: facts, "
    "decisions, names, numbers and open tasks. If it begins with a summary of an earlier part, "
    "summarize only what follows that summary. Answer with the summary alone."
)
_HEAD_ROLES = ("system", "developer")


def head_length(messages: list[Any]) -> int:
    """Leading system (or developer) messages: never summarized."""
    n = 0
    while n < len(messages) and isinstance(messages[n], dict) and messages[n].get("role") in _HEAD_ROLES:
        n += 1
    return n


def digest(messages: list[Any], n: int) -> str:
    return hashlib.sha256(orjson.dumps(messages[:n])).hexdigest()


def matching(messages: list[Any], checkpoints: list[Checkpoint]) -> Checkpoint | None:
    """The checkpoint covering the longest prefix this request re-sends exactly, if any. At
    least one message must follow the prefix (the one to answer)."""
    for checkpoint in sorted(checkpoints, key=lambda c: c.messages, reverse=True):
        fits = head_length(messages) < checkpoint.messages < len(messages)
        if fits and digest(messages, checkpoint.messages) == checkpoint.digest:
            return checkpoint
    return None


def summary_message(summary: str) -> dict[str, Any]:
    return {"role": "system", "content": SUMMARY_INTRO + summary}


def substituted(messages: list[Any], checkpoint: Checkpoint | None) -> list[Any]:
    """What the upstream gets: the head, the summary, then what follows the prefix."""
    if checkpoint is None:
        return messages
    head = head_length(messages)
    return [*messages[:head], summary_message(checkpoint.summary), *messages[checkpoint.messages :]]


def segment_end(messages: list[Any], start: int, keep_last: int) -> int:
    """Where the part to summarize ends (exclusive): before the last `keep_last` messages, and
    never between a tool call and its results (tool messages stay with their call)."""
    end = len(messages) - keep_last
    while end > start and isinstance(messages[end], dict) and messages[end].get("role") == "tool":
        end -= 1
    return end


def user_turns(messages: list[Any], start: int) -> int:
    turns = 0
    for m in messages[start:] if start else messages:
        if isinstance(m, dict) and m.get("role") == "user":
            turns += 1
    return turns


def summarizer_messages(sent: list[Any], end: int, words: int) -> list[Any]:
    """The summarizer's conversation: the upstream's view up to the segment's end (the same
    bytes it was sent last turn, so its prefix cache serves them), then the instruction."""
    return [*sent[:end], {"role": "user", "content": SUMMARIZE.format(words=words)}]
