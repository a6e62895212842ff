"""Deterministic embeddings: each input hashes (BLAKE2b) to a unit vector, 8 floats by default."""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

import orjson

from simulator.answers import BadRequest
from simulator.tokens import count_bytes_tokens

DEFAULT_DIMENSIONS = 8
MAX_DIMENSIONS = 4096


def _inputs(raw: object) -> list[bytes]:
    """Accepts a string, a list of strings, a token array or a list of token arrays."""
    if isinstance(raw, str):
        return [raw.encode()]
    if isinstance(raw, list) and raw:
        if all(isinstance(item, str) for item in raw):
            return [item.encode() for item in raw]
        if all(isinstance(item, int) for item in raw):
            return [orjson.dumps(raw)]
        if all(isinstance(item, list) for item in raw):
            return [orjson.dumps(item) for item in raw]
    raise BadRequest("'input' must be a string or a non-empty array of strings or token arrays")


def vector(data: bytes, dimensions: int) -> list[float]:
    """The embedding of ``data``: the same bytes always give the same unit vector."""
    values: list[float] = []
    counter = 0
    while len(values) < dimensions:
        digest = hashlib.blake2b(data, digest_size=64, salt=counter.to_bytes(16, "little")).digest()
        values.extend(v / 32767.5 - 1.0 for v in struct.unpack("<32H", digest))
        counter += 1
    del values[dimensions:]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _dimensions(body: dict[str, Any]) -> int:
    dims = body.get("dimensions", DEFAULT_DIMENSIONS)
    if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= MAX_DIMENSIONS:
        raise BadRequest(f"'dimensions' must be an integer between 1 and {MAX_DIMENSIONS}")
    return dims


def openai_embeddings(body: dict[str, Any], model: str) -> tuple[dict[str, Any], int]:
    """The OpenAI ``/embeddings`` answer and its prompt token count."""
    inputs = _inputs(body.get("input"))
    dims = _dimensions(body)
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        vec = vector(item, dims)
        encoded: Any = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if as_base64 else vec
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(count_bytes_tokens(item) for item in inputs)
    answer = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return answer, tokens


def native_embeddings(body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The Workers AI native answer to ``{"text": ...}`` (as for ``@cf/baai/bge-*``)."""
    inputs = _inputs(body.get("text"))
    dims = _dimensions(body)
    tokens = sum(count_bytes_tokens(item) for item in inputs)
    answer = {"shape": [len(inputs), dims], "data": [vector(item, dims) for item in inputs], "pooling": "cls"}
    return answer, tokens
