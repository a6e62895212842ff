"""Hot reload: watch the policy directory, check an edited revision, swap it in whole.

The directory is polled (one stat per file, every `reload_interval_s`) rather than watched
with inotify: polling also sees edits on network and bind mounts and Kubernetes ConfigMap
symlink swaps, which inotify misses, and a second of delay is fine for a policy edit. An
edit is checked in a child process (adapters.policy.check) before it is compiled here; a
refused edit is logged once and counted, and the last good revision keeps serving. Each
server worker process reloads on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from adapters.policy.check import check_in_child
from adapters.policy.compiled import CompiledRevision, compile_revision
from adapters.policy.source import Fingerprint, PolicyLoadError, fingerprint, read_policy_dir

logger = logging.getLogger("tollgate.policy")


@dataclass(slots=True)
class ReloadCounts:
    reloaded: int = 0  # edits accepted and serving
    refused: int = 0  # edits refused (syntax, checks, failing tests, unreadable files)
    last_error: str | None = None


class PolicyReloader:
    def __init__(
        self,
        directory: str,
        entrypoint: str,
        current: Callable[[], CompiledRevision],
        apply: Callable[[CompiledRevision], None],
        interval_s: float,
    ) -> None:
        self._directory = directory
        self._entrypoint = entrypoint
        self._current = current
        self._apply = apply
        self._interval_s = interval_s
        self._seen: Fingerprint | None = None
        self.counts = ReloadCounts()

    async def prime(self) -> None:
        """Remember the directory as it is now, so that only later edits are reloaded."""
        self._seen = await asyncio.to_thread(fingerprint, self._directory)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check_once()
            except Exception:  # the watcher must outlive any one bad edit
                logger.exception("policy reload failed", extra={"dir": self._directory})

    async def check_once(self) -> None:
        seen = await asyncio.to_thread(fingerprint, self._directory)
        if seen == self._seen:
            return
        try:
            source = await asyncio.to_thread(read_policy_dir, self._directory)
        except PolicyLoadError as exc:
            self._refuse(seen, "(unreadable)", str(exc))
            return
        if await asyncio.to_thread(fingerprint, self._directory) != seen:
            return  # still being written: look again at the next tick
        current = self._current()
        if source.revision == current.revision:
            self._seen = seen
            return
        report = await check_in_child(source, self._entrypoint)
        if not report.ok:
            self._refuse(seen, source.revision, report.error or "refused")
            return
        try:
            compiled = await asyncio.to_thread(compile_revision, source, self._entrypoint)
        except PolicyLoadError as exc:
            self._refuse(seen, source.revision, str(exc))
            return
        self._apply(compiled)
        self._seen = seen
        self.counts.reloaded += 1
        self.counts.last_error = None
        logger.info(
            "policy reloaded",
            extra={
                "revision": compiled.revision,
                "previous_revision": current.revision,
                "tests": report.tests,
                "cacheable": compiled.cacheable,
                "uncacheable_calls": list(compiled.uncacheable_calls),
            },
        )

    def _refuse(self, seen: Fingerprint, revision: str, why: str) -> None:
        self._seen = seen  # refused once, logged once: the next edit is looked at afresh
        self.counts.refused += 1
        self.counts.last_error = why
        logger.error(
            "policy edit refused; the last good revision keeps serving",
            extra={"refused_revision": revision, "serving_revision": self._current().revision, "why": why},
        )
