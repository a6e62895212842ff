"""Tollgate's build: the metadata is in pyproject.toml; this file only adds, when asked, the
request path compiled to C with mypyc (TOLLGATE_COMPILE=1; docs/architecture.md, Compiled
request path). The compiled modules are the same Python sources, type-checked strictly;
without the variable the package is plain Python and behaves the same, more slowly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from setuptools import setup

# The modules every request runs through. Left out, whatever their path: package
# `__init__` files (a compiled package init under a plain parent breaks the import order),
# and modules mypyc cannot compile (async generators: gateway/pipeline.py and the upstream
# stream readers; classes inheriting builtins: gateway/redaction/scrub.py), and
# gateway/logs.py, whose handler and formatter subclass the logging module's classes (a
# compiled subclass crashed when the logging module dropped its handler), and the edge,
# gateway/http.py: compiled, the errors of requests that had waited together on one lease
# call were lost (four of five answered nothing at all when the store went down; not
# understood, so it stays Python: its own work is small).
COMPILED = (
    "gateway/access_log.py",
    "gateway/chunk_shapes.py",
    "gateway/cohorts.py",
    "gateway/exchange.py",
    "gateway/forward.py",
    "gateway/guards.py",
    "gateway/http_body.py",
    "gateway/in_flight.py",
    "gateway/keys.py",
    "gateway/output_limit.py",
    "gateway/random_ids.py",
    "gateway/request_ids.py",
    "gateway/stream_deadline.py",
    "gateway/validation.py",
    "gateway/audit/*.py",
    "gateway/doors/*.py",
    "gateway/metering/*.py",
    "gateway/stages/*.py",
    "gateway/sessions/*.py",
    "gateway/tools/*.py",
    "gateway/policy/input.py",
    "gateway/redaction/detector.py",
    "gateway/redaction/guard.py",
    "gateway/redaction/joined.py",
    "gateway/redaction/prefilter.py",
    "gateway/redaction/request.py",
    "gateway/redaction/settings.py",
    "gateway/redaction/window.py",
    "telemetry/labels.py",
    "telemetry/recorder.py",
    "telemetry/registry.py",
    "adapters/audit/jsonl.py",
    "adapters/state/redis.py",
    "adapters/state/redis_wire.py",
    "adapters/upstream/http_client.py",
    "adapters/upstream/http_connection.py",
    "adapters/upstream/openai_compat.py",
)
# Matched above and left plain: pydantic models (read once, at config load; pydantic builds
# them from the class at run time); an error class whose class attributes override its
# plain base's (compiled, the overrides were not seen: a 429 went out as a 500); the
# detector catalog, which the tests' fault injection subclasses (a compiled class cannot
# be subclassed by plain Python).
PLAIN = (
    "gateway/sessions/config.py",
    "gateway/sessions/refusals.py",
    "gateway/redaction/detector.py",
)


def compiled_modules() -> list[str]:
    root = Path(__file__).parent
    paths = {str(path.relative_to(root)) for pattern in COMPILED for path in root.glob(pattern)}
    return sorted(path for path in paths if not path.endswith("__init__.py") and path not in PLAIN)


def ext_modules() -> list[Any]:
    if os.environ.get("TOLLGATE_COMPILE", "").lower() not in ("1", "true", "yes"):
        return []
    from mypyc.build import mypycify  # mypy's compiler: needs mypy, the stubs and pydantic installed

    return mypycify(compiled_modules(), group_name="gateway._native", opt_level="3")


if __name__ == "__main__":  # setuptools runs this file as __main__; the tests read COMPILED
    setup(ext_modules=ext_modules())
