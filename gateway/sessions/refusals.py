"""The refusals of sessions and context windows, in OpenAI's error format."""

from __future__ import annotations

from gateway.errors import GatewayError, InvalidRequest


class SessionBudgetExceeded(GatewayError):
    status = 429
    type = "insufficient_quota"
    code = "session_budget_exceeded"


def session_budget_exceeded(what: str, used: int, asked: int, limit: int) -> SessionBudgetExceeded:
    return SessionBudgetExceeded(
        f"This request would take the session past its {what} limit: {used} used, up to {asked} more "
        f"asked for this request, limit {limit}. Start a new session, or summarize this one."
    )


def input_ceiling_exceeded(tokens: int, ceiling: int) -> InvalidRequest:
    return InvalidRequest(
        f"This request's input is about {tokens} tokens, over this session's limit of {ceiling} tokens "
        "per request. Shorten the conversation (summarize older turns) and retry.",
        param="messages",
        code="context_length_exceeded",
    )


def no_window_fits(tokens: int, output: int, windows: dict[str, int]) -> InvalidRequest:
    listed = ", ".join(f"{model}: {size}" for model, size in windows.items())
    return InvalidRequest(
        f"This request needs about {tokens + output} tokens ({tokens} of input, {output} of output), "
        f"more than the context window of every model that may serve it ({listed}). Shorten the "
        "conversation or lower max_tokens.",
        param="messages",
        code="context_length_exceeded",
    )
