"""Hot reload: watch the policy directory, check an edited revision once per machine, and
swap every worker to it together.

The directory is polled (one stat per file, every `reload_interval_s`) rather than watched
with inotify: polling also sees edits on network and bind mounts and Kubernetes ConfigMap
symlink swaps, which inotify misses. An edited revision is checked in a child process
(adapters.policy.check) by whichever worker takes the machine's check lock first; the
verdict and the compiled bundle go to the shared state directory, and an accepted revision
is announced there (adapters.policy.shared_revisions). Every worker follows the
announcement at its next tick. A refused edit is logged once per worker and counted, and
the last good revision keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from adapters.policy.check import CHECK_TIMEOUT_S, CheckReport
from adapters.policy.check_cache import CheckCache, check_with_cache
from adapters.policy.compiled import CompiledRevision, compile_revision
from adapters.policy.shared_revisions import SharedRevisions, Verdict
from adapters.policy.source import Fingerprint, PolicyLoadError, PolicySource, fingerprint, read_policy_dir

logger = logging.getLogger("tollgate.policy")


@dataclass(slots=True)
class ReloadCounts:
    reloaded: int = 0  # announced revisions this worker swapped to
    refused: int = 0  # edits refused (syntax, checks, failing tests, unreadable files)
    checked: int = 0  # revisions this worker checked itself (the others took the shared verdict)
    last_error: str | None = None


class PolicyReloader:
    def __init__(
        self,
        directory: str,
        entrypoint: str,
        shared: SharedRevisions,
        current: Callable[[], CompiledRevision],
        apply: Callable[[CompiledRevision], None],
        interval_s: float,
        cache: CheckCache | None = None,
    ) -> None:
        self._directory = directory
        self._entrypoint = entrypoint
        self._shared = shared
        self._current = current
        self._apply = apply
        self._interval_s = interval_s
        self._cache = cache
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
        """Look at the directory if it changed, then follow the announcement, but only once
        the directory is settled: a worker never follows an older run's announcement over
        an edit it has yet to look at."""
        seen = await asyncio.to_thread(fingerprint, self._directory)
        if seen != self._seen:
            await self._look_at(seen)
        if seen == self._seen:
            await self._follow_announcement()

    async def _look_at(self, seen: Fingerprint) -> None:
        try:
            source = await asyncio.to_thread(read_policy_dir, self._directory)
        except PolicyLoadError as exc:
            self._refuse(seen, "(unreadable)", str(exc))
            return
        if await asyncio.to_thread(fingerprint, self._directory) != seen:
            return  # still being written: look again at the next tick
        serving = self._current().revision
        if source.revision == serving and self._shared.announced() in (None, serving):
            self._seen = seen
            return
        verdict = await self._settle(source)
        if verdict is None:
            return  # another worker is checking, or the directory moved on: look again at the next tick
        if not verdict.ok:
            self._refuse(seen, source.revision, verdict.error or "refused")
            return
        self._seen = seen

    async def _settle(self, source: PolicySource) -> Verdict | None:
        """The revision's verdict, with an accepted one announced: from the state directory,
        or reached here under the machine's check lock; None while another worker holds it."""
        shared, revision = self._shared, source.revision
        verdict = shared.verdict(revision)
        if verdict is not None and (not verdict.ok or shared.announced() == revision):
            return verdict
        with shared.try_lock() as locked:
            if not locked:
                return None
            try:  # under the lock, the directory must still hold this revision: a newer edit wins
                now = await asyncio.to_thread(read_policy_dir, self._directory)
            except PolicyLoadError:
                return None
            if now.revision != revision:
                return None
            verdict = shared.verdict(revision)
            if verdict is None:
                verdict = await self._check(source)
            if verdict.ok and shared.announced() != revision:
                if not shared.has_bundle(revision):
                    compiled = await asyncio.to_thread(compile_revision, source, self._entrypoint)
                    await asyncio.to_thread(shared.save_bundle, compiled)
                shared.announce(revision)
            return verdict

    async def _check(self, source: PolicySource) -> Verdict:
        self.counts.checked += 1
        started = time.monotonic()
        report = await check_with_cache(source, self._entrypoint, self._cache)
        timed_out = not report.ok and time.monotonic() - started >= CHECK_TIMEOUT_S
        compiled: CompiledRevision | None = None
        if report.ok:
            try:
                compiled = await asyncio.to_thread(compile_revision, source, self._entrypoint)
            except PolicyLoadError as exc:
                report = CheckReport(source.revision, False, str(exc))
        if compiled is None:
            verdict = Verdict(source.revision, False, report.error or "refused", report.tests)
        else:
            verdict = Verdict(
                source.revision, True, None, report.tests, compiled.cacheable, compiled.uncacheable_calls
            )
        if not timed_out:  # a check cut short by a loaded machine is no verdict on the revision
            await asyncio.to_thread(self._shared.record, verdict, compiled)
        logger.info(
            "policy revision checked",
            extra={
                "revision": source.revision,
                "ok": verdict.ok,
                "tests": report.tests,
                "from_cache": report.cached,
                "pid": os.getpid(),
            },
        )
        return verdict

    async def _follow_announcement(self) -> None:
        shared = self._shared
        announced = shared.announced()
        current = self._current()
        if announced is None or announced == current.revision:
            return
        verdict = shared.verdict(announced)
        if verdict is None or not verdict.ok:
            return
        compiled = await asyncio.to_thread(shared.load, verdict)
        if compiled is None or shared.announced() != announced:
            return  # superseded meanwhile: the next tick follows the newer announcement
        self._apply(compiled)
        self.counts.reloaded += 1
        self.counts.last_error = None
        logger.info(
            "policy reloaded",
            extra={
                "revision": compiled.revision,
                "previous_revision": current.revision,
                "tests": verdict.tests,
                "cacheable": compiled.cacheable,
                "uncacheable_calls": list(compiled.uncacheable_calls),
                "pid": os.getpid(),
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


def publish_checked(
    shared: SharedRevisions, source: PolicySource, report: CheckReport, entrypoint: str
) -> None:
    """`tollgate serve`'s start: the revision it checked becomes the one announced, so the
    workers load it rather than each compiling it (and never follow an earlier run's)."""
    compiled = compile_revision(source, entrypoint)
    verdict = Verdict(
        source.revision, True, None, report.tests, compiled.cacheable, compiled.uncacheable_calls
    )
    shared.record(verdict, compiled)
    shared.announce(source.revision)
