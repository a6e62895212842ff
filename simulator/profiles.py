"""Server profiles: what a replica copies of a real upstream server's behaviour.

Every profile serves the same OpenAI contract (``tool_choice``, ``n``, ``response_format``,
``stop``, token caps: see ``simulator.answers``); they differ where real servers differ. The
sources of each behaviour are listed in docs/simulator.md.

- ``generic``: the simulator's historical behaviour (the default): usage on streams only when
  ``stream_options.include_usage`` asks, cached tokens always reported, no reasoning text.
- ``kimi``: Kimi K2.x as Workers AI serves it: reasoning text (``reasoning`` for K2.6 and later,
  ``reasoning_content`` for K2.5) unless thinking is switched off, cached tokens from the prefix
  cache, a 262,144-token context window.
- ``vllm``: ``vllm serve``: stream usage only when asked; ``prompt_tokens_details`` only with
  ``--enable-prompt-tokens-details`` (``SimConfig.cache_report``); ``stop_reason`` on choices.
- ``sglang``: stream usage only when asked; cached tokens only with ``--enable-cache-report``
  (``SimConfig.cache_report``); ``matched_stop`` on choices.
- ``llama-server``: llama.cpp's C++ server: cached tokens reported, plus a ``timings`` object
  (``cache_n``, ``prompt_n``, ``predicted_n``) on answers and on the last streamed chunk.
- ``llama-cpp-python``: the Python bindings' server: never sends usage on streams, accepts only
  a UUID ``x-request-id`` (400 otherwise, as starlette-context's ``RequestIdPlugin``), runs one
  request at a time, and its event loop (so ``/health`` too) is blocked while a prompt is
  prefilled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ContextError = Literal["openai", "vllm", "llama-server"]
DEFAULT_PROFILE = "generic"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    stream_usage: bool = True  # sends the usage chunk when stream_options.include_usage asks
    cached_tokens: Literal["always", "when_enabled", "never"] = "always"
    reasoning: bool = False  # Kimi K2.x thinking text
    context_window: int | None = None  # prompt + max_tokens above this: the profile's 400
    context_error: ContextError = "openai"
    timings: bool = False  # llama.cpp's "timings" object
    stop_reason_field: bool = False  # vLLM's "stop_reason" on each choice
    matched_stop_field: bool = False  # SGLang's "matched_stop" on each choice
    uuid_request_ids: bool = False  # x-request-id must be a UUID (400 otherwise)
    serial: bool = False  # one request at a time; prefill blocks every route


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("generic"),
        Profile("kimi", reasoning=True, context_window=262_144),
        Profile(
            "vllm",
            cached_tokens="when_enabled",
            context_window=131_072,
            context_error="vllm",
            stop_reason_field=True,
        ),
        Profile(
            "sglang",
            cached_tokens="when_enabled",
            context_window=131_072,
            context_error="vllm",
            matched_stop_field=True,
        ),
        Profile("llama-server", context_window=131_072, context_error="llama-server", timings=True),
        Profile(
            "llama-cpp-python",
            stream_usage=False,
            cached_tokens="never",
            context_window=131_072,
            uuid_request_ids=True,
            serial=True,
        ),
    )
}


def profile_named(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
