"""How hard one upstream is tried: retries, Retry-After, and the time allowed to the first byte.

The forwarder asks this policy after each failure; the rules, in order:

- a failure that another attempt cannot cure (`retryable` false), an upstream's refusal of
  the request (400/413/422) among them: the next candidate, never this upstream again;
- otherwise up to `retries` more attempts on this upstream, each on a replica not yet
  tried, at once; with no such replica, the same one again only when the upstream said
  when (Retry-After), the wait fits the deadline and `max_retry_wait_s`, and no other
  candidate is left (a fallback answers sooner than a wait);
- nothing is retried once a byte reached the client (the forwarder's side of the rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import UpstreamError, UpstreamTimeout

_THROTTLE_CODES = frozenset({"upstream_rate_limited", "upstream_overloaded"})
_TOKENS_PER_BYTE = 0.25  # a request body's size in tokens, roughly: cheap, and only used for time


def estimated_prompt_tokens(body_bytes: int) -> int:
    return int(body_bytes * _TOKENS_PER_BYTE)


@dataclass(frozen=True, slots=True)
class AttemptPolicy:
    retries: int = 2  # further attempts on the same upstream after a retryable failure
    max_retry_wait_s: float = 2.0  # the longest Retry-After the gateway waits out itself
    first_byte_s: float = 60.0  # time to the first byte of a small prompt...
    first_byte_per_1k_tokens_s: float = 0.25  # ...plus this per thousand prompt tokens (prefill)
    response_headers_s: float = 300.0  # time to the response head of any request, plus the same

    def first_byte_timeout(self, prompt_tokens: int) -> float:
        """Prefill-heavy requests are slow to start, not stuck: the allowance grows with the prompt."""
        return self.first_byte_s + self._prefill_s(prompt_tokens)

    def response_headers_timeout(self, prompt_tokens: int) -> float:
        """The time to the response head, for every request (a non-streamed answer's head
        comes after its whole generation): past it, the attempt has failed and the next is tried."""
        return self.response_headers_s + self._prefill_s(prompt_tokens)

    def _prefill_s(self, prompt_tokens: int) -> float:
        return self.first_byte_per_1k_tokens_s * prompt_tokens / 1000

    def may_retry(self, error: UpstreamError, attempts: int) -> bool:
        """Whether this upstream gets another attempt after `attempts` of them, the last failing so."""
        return error.retryable and attempts <= self.retries

    def retry_after_wait(self, error: UpstreamError, remaining: float, fallback_left: bool) -> float | None:
        """Seconds to wait before asking the same replica again, or None to move on."""
        wait = error.retry_after
        if wait is None or fallback_left or wait > self.max_retry_wait_s or wait >= remaining:
            return None
        return wait


def counts_against_replica(error: UpstreamError, deadline_ran_out: bool) -> bool:
    """Whether a failure says the replica is unwell, for its circuit breaker.

    Transient failures do (no connection, a dropped one, a timeout, a 5xx). Not those every
    replica would give alike (the request refused as such, the gateway's credentials, plan or
    quota), nor throttling (the replica is alive; its Retry-After is honoured by the request
    that got it), nor a timeout that was the request's deadline running out: a client asking
    for half a second does not make a replica look sick.
    """
    if not error.retryable or error.code in _THROTTLE_CODES:
        return False
    return not (isinstance(error, UpstreamTimeout) and deadline_ran_out)
