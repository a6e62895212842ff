"""Tollgate's build: the metadata is in pyproject.toml; this file only adds, when asked, the
request path compiled to C with mypyc (TOLLGATE_COMPILE=1; docs/architecture.md, Compiled
request path). The compiled modules are the same Python sources, type-checked strictly;
without the variable the package is plain Python and behaves the same, more slowly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from setuptools import setup

# The modules every request runs through. Left plain (docs/architecture.md, Compiled request
# path, says why for each): package `__init__` files; what mypyc cannot compile (the async
# generators of gateway/stream_relay.py and the upstream stream readers, the subclasses of
# dict and str in gateway/redaction/marks.py); what the test suite found wrong compiled
# (gateway/logs.py); gateway/redaction/detector.py, whose catalog the tests subclass.
COMPILED = (
    "gateway/access_log.py",
    "gateway/chunk_shapes.py",
    "gateway/cohorts.py",
    "gateway/exchange.py",
    "gateway/forward.py",
    "gateway/guards.py",
    "gateway/http.py",
    "gateway/http_body.py",
    "gateway/image_parts.py",
    "gateway/in_flight.py",
    "gateway/keys.py",
    "gateway/log_line.py",
    "gateway/loop_turn.py",
    "gateway/output_limit.py",
    "gateway/pipeline.py",
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
    "gateway/policy/cache.py",
    "gateway/policy/input.py",
    "gateway/redaction/guard.py",
    "gateway/redaction/in_progress.py",
    "gateway/redaction/joined.py",
    "gateway/redaction/prefilter.py",
    "gateway/redaction/request.py",
    "gateway/redaction/scrub.py",
    "gateway/redaction/settings.py",
    "gateway/redaction/state.py",
    "gateway/redaction/window.py",
    "gateway/routing/fingerprint.py",
    "telemetry/labels.py",
    "telemetry/recorder.py",
    "telemetry/registry.py",
    "adapters/audit/jsonl.py",
    "adapters/state/lease_batch.py",
    "adapters/state/redis.py",
    "adapters/state/redis_lease.py",
    "adapters/state/redis_sessions.py",
    "adapters/state/redis_wire.py",
    "adapters/upstream/http_client.py",
    "adapters/upstream/http_connection.py",
    "adapters/upstream/openai_compat.py",
    "adapters/upstream/sse_events.py",
)
# Matched above and left plain: the `tollgate sessions` command (not on the request path),
# pydantic models (read once, at config load; pydantic builds them from the class at run
# time), and an error class whose class attributes override its plain base's (compiled, the
# overrides were not seen: a 429 went out as a 500).
PLAIN = ("gateway/sessions/commands.py", "gateway/sessions/config.py", "gateway/sessions/refusals.py")


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
