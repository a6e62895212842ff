"""multipart/form-data, as the `openai` SDK uploads a file: a few parts, held in memory.

The body was already read within the upload limit, so a small parser over bytes does; any
deviation from the format is an InvalidRequest naming what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.errors import InvalidRequest

_BOUNDARY = re.compile(r'boundary="?([^";]{1,200})"?', re.IGNORECASE)
_PARAM = re.compile(rb'\b(name|filename)="((?:[^"\\]|\\.)*)"', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Part:
    name: str
    filename: str | None
    content: bytes


def parse_form(content_type: str, body: bytes) -> dict[str, Part]:
    """The form's parts by field name (the last of a repeated name wins)."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise InvalidRequest("Upload the file as multipart/form-data.", code="invalid_content_type")
    found = _BOUNDARY.search(content_type)
    if found is None:
        raise InvalidRequest("The multipart Content-Type has no boundary.", code="invalid_multipart")
    delimiter = b"--" + found.group(1).encode("latin-1")
    chunks = body.split(delimiter)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        raise InvalidRequest("The multipart body is cut short or malformed.", code="invalid_multipart")
    parts: dict[str, Part] = {}
    for raw in chunks[1:-1]:
        head, separator, content = raw.removeprefix(b"\r\n").removesuffix(b"\r\n").partition(b"\r\n\r\n")
        if not separator:
            raise InvalidRequest("A multipart part has no headers.", code="invalid_multipart")
        disposition = next(
            (line for line in head.split(b"\r\n") if line.lower().startswith(b"content-disposition:")), None
        )
        if disposition is None:
            raise InvalidRequest("A multipart part has no Content-Disposition.", code="invalid_multipart")
        params = {key.lower().decode(): value for key, value in _PARAM.findall(disposition)}
        if "name" not in params:
            raise InvalidRequest("A multipart part has no field name.", code="invalid_multipart")
        filename = params.get("filename")
        name = params["name"].decode("utf-8", "replace")
        parts[name] = Part(
            name, filename.decode("utf-8", "replace") if filename is not None else None, content
        )
    return parts
