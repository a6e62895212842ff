"""The context window: a prompt that, with the completion it may grow, does not fit is refused
with HTTP 400 and the message the profile's real server sends."""

from __future__ import annotations

import orjson
from aiohttp import web

from simulator.errors import ErrorFormat, error_response
from simulator.profiles import Profile


def overflow(profile: Profile, prompt_tokens: int, max_tokens: int | None) -> int | None:
    """Tokens requested when they exceed the profile's window, else None."""
    window = profile.context_window
    if window is None:
        return None
    # llama-server checks the prompt alone; the others prompt + the completion cap
    wanted = prompt_tokens if profile.context_error == "llama-server" else prompt_tokens + (max_tokens or 0)
    return wanted if wanted > window else None


def context_error(
    profile: Profile, fmt: ErrorFormat, prompt_tokens: int, max_tokens: int | None
) -> web.Response:
    window = profile.context_window
    completion = max_tokens or 0
    total = prompt_tokens + completion
    if profile.context_error == "llama-server" and fmt is ErrorFormat.OPENAI:
        body = {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt_tokens,
                "n_ctx": window,
            }
        }
        return web.Response(status=400, body=orjson.dumps(body), content_type="application/json")
    if profile.context_error == "vllm":
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{completion} output tokens and your prompt contains at least {prompt_tokens} input tokens, "
            f"for a total of at least {total} tokens. Please reduce the length of the input prompt or "
            "reduce max_tokens."
        )
    elif profile.name == "llama-cpp-python":
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested {total} "
            f"tokens ({prompt_tokens} in the messages, {completion} in the completion). Please reduce "
            "the length of the messages or completion."
        )
    else:  # Workers AI's OpenAI-compatible endpoint
        message = (
            f"Requested token count exceeds the model's maximum context length of {window} tokens. "
            f"You requested a total of {total} tokens: {prompt_tokens} tokens from the input messages "
            f"and {completion} tokens for the completion."
        )
    return error_response(fmt, 400, message, param="messages", code_text="context_length_exceeded")
