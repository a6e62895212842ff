"""A batch's input file, line by line: OpenAI's JSONL of requests.

    {"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

A line that is not such a request fails alone, with its custom_id (read from the raw text
when the line is not even JSON) and a clear reason; the rest of the batch goes on. A
custom_id must be unique in the file: a repeated one fails that line.

The file is kept as its upload left it (gateway/jobs/input_files.py): each request line
governed (its body redacted), each line refused then stored as its error,

    {"custom_id": "request-2", "refused": {"status": 403, "error": {"message": ..., ...}}}

so that the line fails with that error when a batch is created from the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import GatewayError, InvalidRequest
from gateway.exchange import Endpoint

ENDPOINTS = {"/v1/chat/completions": Endpoint.CHAT, "/v1/embeddings": Endpoint.EMBEDDINGS}
MAX_CUSTOM_ID = 512
_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"((?:[^"\\]|\\.){1,512})"')


class RecordedError(GatewayError):
    """An error of gateway/errors.py as recorded when its line was uploaded: same status, same body."""

    def __init__(self, status: int, error: dict[str, Any]) -> None:
        message, param, code, kind = (error.get(k) for k in ("message", "param", "code", "type"))
        super().__init__(
            message if isinstance(message, str) else "The request was refused.",
            param=param if isinstance(param, str) else None,
            code=code if isinstance(code, str) else None,
        )
        self.status = status
        self.type = kind if isinstance(kind, str) else "invalid_request_error"


@dataclass(frozen=True, slots=True)
class BatchLine:
    line: int  # 0-based, among the file's non-empty lines
    custom_id: str | None
    body: bytes  # the request body as JSON text ("" when the line is refused)
    error: GatewayError | None = None
    url: str = ""  # the endpoint the line names ("" when the line is refused)


def request_lines(content: bytes) -> list[bytes]:
    """The file's lines that say something (blank lines are skipped, as OpenAI skips them)."""
    return [line for line in content.splitlines() if line.strip()]


def read_lines(content: bytes, endpoint: str, max_lines: int) -> list[BatchLine]:
    """The stored file's requests for a batch on `endpoint`; raises InvalidRequest only for a
    file that is no JSONL at all."""
    raw_lines = request_lines(content)
    if not raw_lines:
        raise InvalidRequest("The input file has no requests.", param="input_file_id", code="empty_file")
    if len(raw_lines) > max_lines:
        raise too_many_lines(len(raw_lines), max_lines, "input_file_id")
    seen: set[str] = set()
    lines = []
    for index, raw in enumerate(raw_lines):
        parsed = _stored_line(index, raw, endpoint)
        custom_id = parsed.custom_id
        if custom_id is not None and parsed.error is None:
            if custom_id in seen:
                parsed = BatchLine(
                    index, custom_id, b"", _invalid(index, f"custom_id {custom_id!r} is repeated")
                )
            seen.add(custom_id)
        lines.append(parsed)
    return lines


def too_many_lines(count: int, max_lines: int, param: str) -> InvalidRequest:
    return InvalidRequest(
        f"The input file has {count} requests; a batch may have at most {max_lines}.",
        param=param,
        code="too_many_requests",
    )


def read_request(index: int, raw: bytes) -> BatchLine:
    """One line as the client uploaded it: a request to an endpoint batches serve, or its error."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return BatchLine(index, _custom_id_in(raw), b"", _invalid(index, f"it is not valid JSON ({exc})"))
    return _request(index, data, None)


def stored_request(line: BatchLine, body: dict[str, Any]) -> bytes:
    """The line as kept: the governed `body` in OpenAI's line shape."""
    return orjson.dumps({"custom_id": line.custom_id, "method": "POST", "url": line.url, "body": body})


def stored_refusal(custom_id: str | None, error: GatewayError) -> bytes:
    """A refused line as kept: its custom_id and the error it fails with."""
    return orjson.dumps({"custom_id": custom_id, "refused": {"status": error.status, **error.body()}})


def _stored_line(index: int, raw: bytes, endpoint: str) -> BatchLine:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return BatchLine(index, _custom_id_in(raw), b"", _invalid(index, f"it is not valid JSON ({exc})"))
    refused = data.get("refused") if isinstance(data, dict) else None
    if isinstance(refused, dict) and isinstance(refused.get("error"), dict):
        custom_id = data.get("custom_id")
        status = refused.get("status")
        return BatchLine(
            index,
            custom_id if isinstance(custom_id, str) else None,
            b"",
            RecordedError(status if isinstance(status, int) else 400, refused["error"]),
        )
    return _request(index, data, endpoint)


def _request(index: int, data: Any, endpoint: str | None) -> BatchLine:
    """The request `data` holds; `endpoint`: the one it must name (None: any batches serve)."""
    if not isinstance(data, dict):
        return BatchLine(index, None, b"", _invalid(index, "it is not a JSON object"))
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        return BatchLine(
            index, None, b"", _invalid(index, f"'custom_id' must be a string of 1-{MAX_CUSTOM_ID} characters")
        )
    if data.get("method") != "POST":
        return BatchLine(index, custom_id, b"", _invalid(index, "'method' must be \"POST\""))
    url = data.get("url")
    if endpoint is not None and url != endpoint:
        return BatchLine(
            index, custom_id, b"", _invalid(index, f"'url' must be the batch's endpoint {endpoint!r}")
        )
    if not isinstance(url, str) or url not in ENDPOINTS:
        return BatchLine(
            index, custom_id, b"", _invalid(index, f"'url' must be one of {', '.join(ENDPOINTS)}")
        )
    body = data.get("body")
    if not isinstance(body, dict):
        return BatchLine(index, custom_id, b"", _invalid(index, "'body' must be a JSON object"))
    return BatchLine(index, custom_id, orjson.dumps(body), url=url)


def _custom_id_in(raw: bytes) -> str | None:
    found = _CUSTOM_ID.search(raw)
    if found is None:
        return None
    try:
        value = orjson.loads(b'"' + found.group(1) + b'"')
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _invalid(index: int, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"Line {index + 1} of the input file is not a valid request: {why}.", code="invalid_line"
    )
