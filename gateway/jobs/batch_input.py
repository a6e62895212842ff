"""A batch's input file, line by line: OpenAI's JSONL of requests.

    {"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

A line that is not such a request fails alone, with its custom_id (read from the raw text
when the line is not even JSON) and a clear reason; the rest of the batch goes on. A
custom_id must be unique in the file: a repeated one fails that line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from gateway.errors import InvalidRequest

_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"((?:[^"\\]|\\.){1,512})"')
MAX_CUSTOM_ID = 512


@dataclass(frozen=True, slots=True)
class BatchLine:
    line: int  # 0-based, among the file's non-empty lines
    custom_id: str | None
    body: bytes  # the request body as JSON text ("" when the line is refused)
    error: InvalidRequest | None = None


def read_lines(content: bytes, endpoint: str, max_lines: int) -> list[BatchLine]:
    """The file's requests; raises InvalidRequest only for a file that is no JSONL at all."""
    raw_lines = [line for line in content.splitlines() if line.strip()]
    if not raw_lines:
        raise InvalidRequest("The input file has no requests.", param="input_file_id", code="empty_file")
    if len(raw_lines) > max_lines:
        raise InvalidRequest(
            f"The input file has {len(raw_lines)} requests; a batch may have at most {max_lines}.",
            param="input_file_id",
            code="too_many_requests",
        )
    seen: set[str] = set()
    lines = []
    for index, raw in enumerate(raw_lines):
        parsed = _line(index, raw, endpoint)
        custom_id = parsed.custom_id
        if custom_id is not None and parsed.error is None:
            if custom_id in seen:
                parsed = BatchLine(
                    index, custom_id, b"", _invalid(index, f"custom_id {custom_id!r} is repeated")
                )
            seen.add(custom_id)
        lines.append(parsed)
    return lines


def _line(index: int, raw: bytes, endpoint: str) -> BatchLine:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return BatchLine(index, _custom_id_in(raw), b"", _invalid(index, f"it is not valid JSON ({exc})"))
    if not isinstance(data, dict):
        return BatchLine(index, None, b"", _invalid(index, "it is not a JSON object"))
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        return BatchLine(
            index, None, b"", _invalid(index, f"'custom_id' must be a string of 1-{MAX_CUSTOM_ID} characters")
        )
    if data.get("method") != "POST":
        return BatchLine(index, custom_id, b"", _invalid(index, "'method' must be \"POST\""))
    if data.get("url") != endpoint:
        return BatchLine(
            index, custom_id, b"", _invalid(index, f"'url' must be the batch's endpoint {endpoint!r}")
        )
    body = data.get("body")
    if not isinstance(body, dict):
        return BatchLine(index, custom_id, b"", _invalid(index, "'body' must be a JSON object"))
    return BatchLine(index, custom_id, orjson.dumps(body))


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
