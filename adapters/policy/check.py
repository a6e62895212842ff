"""Checking a policy revision before the gateway serves it, in a child process.

A revision is accepted when its modules pass the static checks (rego_checks), compile,
and its own tests pass. The check runs in a child process (`python -m adapters.policy
ENTRYPOINT`, the source on stdin, a JSON report on stdout) because regopy aborts the
whole process on some inputs (a C++ exception it does not catch, seen
with `with input as {...}` in a compiled module): a broken edit must cost a refused
revision, never the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass

import orjson

from adapters.policy.compiled import compile_revision
from adapters.policy.rego_tests import describe, run_rego_tests
from adapters.policy.source import PolicyLoadError, PolicySource

CHECK_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class CheckReport:
    revision: str
    ok: bool
    error: str | None = None  # why the revision is refused
    tests: str = ""  # e.g. "24 passed, 0 failed"
    cached: bool = False  # a passed check remembered from before (adapters.policy.check_cache), not run now


def check_policy(source: PolicySource, entrypoint: str) -> CheckReport:
    """In this process: the static checks, the compilation, the tests."""
    try:
        compile_revision(source, entrypoint)
        report = run_rego_tests(source)
    except PolicyLoadError as exc:
        return CheckReport(source.revision, False, str(exc))
    if not report.passed:
        return CheckReport(
            source.revision, False, f"the policy's tests fail: {describe(report)}", report.summary()
        )
    return CheckReport(source.revision, True, tests=report.summary())


async def check_in_child(
    source: PolicySource, entrypoint: str, timeout_s: float = CHECK_TIMEOUT_S
) -> CheckReport:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adapters.policy",
        entrypoint,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await process.communicate(source.to_json())
    except TimeoutError:
        await _ended(process)
        return CheckReport(source.revision, False, f"checking the policy took longer than {timeout_s:.0f}s")
    except BaseException:  # cancelled (the server stopping): the child and its pipes go too
        with contextlib.suppress(BaseException):
            await _ended(process)
        raise
    try:
        doc = orjson.loads(out)
        return CheckReport(doc["revision"], doc["ok"], doc["error"], doc["tests"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        last = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        return CheckReport(
            source.revision,
            False,
            f"the embedded engine crashed while checking the policy (exit code {process.returncode}): {last}",
        )


async def _ended(process: asyncio.subprocess.Process) -> None:
    """The child killed, its pipes read to their end and closed (a pipe left open would be
    closed only by the garbage collector, with a warning), its exit awaited."""
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    await process.communicate()


def child_main(entrypoint: str) -> int:
    """The child's side: the report goes to the original stdout; anything regopy prints on
    its own (it writes compile errors to file descriptor 1) is sent to stderr instead."""
    report_fd = os.dup(1)
    os.dup2(2, 1)
    source = PolicySource.from_json(sys.stdin.buffer.read())
    report = check_policy(source, entrypoint)
    doc = {"revision": report.revision, "ok": report.ok, "error": report.error, "tests": report.tests}
    with os.fdopen(report_fd, "wb") as out:
        out.write(orjson.dumps(doc))
    return 0
