"""Prefix cache: per replica, block-granular, true prefixes only; Workers AI session affinity."""

from __future__ import annotations

from typing import Any

import aiohttp

from simulator import SimConfig, Simulator
from simulator.prefix_cache import PrefixCache
from simulator.tokens import block_keys, count_bytes_tokens, prompt_bytes, split_words
from tests.simulator.bodies import chat_body

BLOCK = 16


async def _usage(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> dict[str, Any]:
    async with http.post(url, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        document = await resp.json()
    usage: dict[str, Any] = document.get("result", document)["usage"]
    return usage


def _cached(usage: dict[str, Any]) -> int:
    cached: int = usage["prompt_tokens_details"]["cached_tokens"]
    return cached


async def test_next_turn_hits_the_cache(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.url + "/v1/chat/completions"
    first = await _usage(http, url, chat_body("What is a toll gate?"))
    second = await _usage(
        http, url, chat_body("What is a toll gate?", "A gate with a toll.", "And a gateway?")
    )
    assert _cached(first) == 0
    assert _cached(second) > 0
    assert _cached(second) % BLOCK == 0
    assert first["prompt_tokens"] < second["prompt_tokens"]
    # Every full block of turn 1 was reused; the next may be too (the answer's, cached after
    # turn 1, begins with the same `{"role":"assistant","content":"`), not the test's own text.
    assert first["prompt_tokens"] - BLOCK < _cached(second) <= first["prompt_tokens"] + BLOCK
    stats = sim.replica_stats()
    assert stats[0] == {
        "requests": 2,
        "prompt_tokens": first["prompt_tokens"] + second["prompt_tokens"],
        "cached_tokens": _cached(second),
    }
    assert stats[1]["requests"] == 0


async def test_replicas_have_separate_caches(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = chat_body("same prompt on both replicas")
    assert _cached(await _usage(http, sim.urls[0] + "/v1/chat/completions", body)) == 0
    assert _cached(await _usage(http, sim.urls[1] + "/v1/chat/completions", body)) == 0
    assert _cached(await _usage(http, sim.urls[1] + "/v1/chat/completions", body)) > 0
    assert [rec.replica for rec in sim.requests] == [0, 1, 1]


async def test_only_true_prefixes_match(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.url + "/v1/chat/completions"
    await _usage(http, url, chat_body("question"))
    changed = chat_body("question")
    changed["messages"][0]["content"] = "Different system prompt. " + changed["messages"][0]["content"]
    assert _cached(await _usage(http, url, changed)) == 0


async def test_workers_ai_affinity_makes_the_hit_land(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.workers_ai_base_url + "/accounts/acct/ai/run/@cf/moonshotai/kimi-k2.6"
    turn1 = {"messages": chat_body("hello")["messages"]}
    turn2 = {"messages": chat_body("hello", "hi!", "tell me more")["messages"]}
    await _usage(http, url, turn1, **{"x-session-affinity": "ses_12345678"})
    usage = await _usage(http, url, turn2, **{"x-session-affinity": "ses_12345678"})
    assert _cached(usage) > 0 and _cached(usage) % BLOCK == 0
    first, second = sim.requests[-2:]
    assert first.workers_ai_replica is not None and first.workers_ai_replica == second.workers_ai_replica
    wa_stats = sim.workers_ai_stats()
    assert len(wa_stats) == 4
    assert wa_stats[first.workers_ai_replica]["cached_tokens"] == _cached(usage)


async def test_workers_ai_sessions_spread_over_instances(http: aiohttp.ClientSession) -> None:
    async with Simulator(SimConfig(workers_ai_replicas=4)) as sim:
        url = sim.workers_ai_base_url + "/accounts/acct/ai/v1/chat/completions"
        for i in range(16):
            body = chat_body("hello", model="@cf/moonshotai/kimi-k2.6")
            await _usage(http, url, body, **{"x-session-affinity": f"session-{i}"})
        assert len({rec.workers_ai_replica for rec in sim.requests}) > 1


def test_prefix_cache_lru_eviction_takes_a_sequences_tail_first() -> None:
    cache = PrefixCache(capacity=3)
    assert cache.lookup_and_insert([1, 2, 3]) == 0
    assert cache.lookup_and_insert([1, 2, 3]) == 3
    # Evicts 3: the least recently used sequence, its tail first (its head, 1, was just used).
    assert cache.lookup_and_insert([1, 4]) == 1
    assert cache.lookup_and_insert([1, 2]) == 2
    assert cache.lookup_and_insert([5, 6, 7]) == 0  # a sequence as long as the cache takes it all
    assert cache.lookup_and_insert([1]) == 0
    assert len(cache) == 3


async def test_the_answers_blocks_stay_cached_for_the_next_turn(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    url = sim.url + "/v1/chat/completions"
    body = chat_body("Tell me about toll gates, at length please.")
    async with http.post(url, json=body) as resp:
        first = await resp.json()
    answer = first["choices"][0]["message"]
    body["messages"] += [answer, {"role": "user", "content": "And then?"}]
    second = await _usage(http, url, body)
    answered = count_bytes_tokens(prompt_bytes(body["messages"][:-1], None))
    # Every full block up to the end of the answer was cached, the generated tokens' too: more
    # than the first prompt held (its full blocks alone would be fewer tokens than it had).
    assert first["usage"]["prompt_tokens"] < _cached(second)
    assert answered - _cached(second) < BLOCK


def test_tokenizer_is_deterministic_and_prefix_preserving() -> None:
    turn1 = [{"role": "user", "content": "a" * 200}]
    turn2 = [*turn1, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    data1, data2 = prompt_bytes(turn1, None), prompt_bytes(turn2, None)
    assert count_bytes_tokens(data1) == -(-len(data1) // 4)
    assert count_bytes_tokens(b"") == 1
    keys1, keys2 = block_keys(data1, 4), block_keys(data2, 4)
    assert keys1 and keys2[: len(keys1)] == keys1
    assert block_keys(data1, 4) == keys1
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert prompt_bytes(turn1, tools).endswith(data1)
    assert split_words(" tok0 tok1  x ") == [" tok0", " tok1", "  x", " "]
    assert "".join(split_words("a  b\nc")) == "a  b\nc"
