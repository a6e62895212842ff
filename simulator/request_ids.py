"""``x-request-id`` as llama-cpp-python's server handles it (starlette-context's ``RequestIdPlugin``
with validation on): a value that is not a UUID is refused with a plain-text 400 before any
route runs; a valid one, or a fresh UUID when none was sent, is echoed on the response."""

from __future__ import annotations

import uuid

from aiohttp import web
from aiohttp.typedefs import Handler

INVALID_MESSAGE = "Invalid UUID in request header X-Request-ID"
_KEY = web.RequestKey("sim_request_id", str)


@web.middleware
async def uuid_request_ids(request: web.Request, handler: Handler) -> web.StreamResponse:
    given = request.headers.get("x-request-id")
    if given is None:
        given = uuid.uuid4().hex
    else:
        try:
            uuid.UUID(given)
        except ValueError:
            return web.Response(status=400, text=INVALID_MESSAGE)
    request[_KEY] = given
    return await handler(request)


async def echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the id goes out with the headers, streamed answers included."""
    value = request.get(_KEY)
    if value is not None:
        response.headers["x-request-id"] = value
