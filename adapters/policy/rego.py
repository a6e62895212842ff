"""The embedded policy engine: the policy directory evaluated in process by regopy.

Evaluations run off the event loop, in a small pool of threads with one interpreter per
thread (regopy releases the GIL while it evaluates); an evaluation that outlives the
policy timeout gives its thread up to a fresh one (adapters.policy.eval_pool). The serving
revision is one immutable object swapped whole on reload, so an evaluation in flight
finishes on the revision it started with.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import orjson

from adapters.policy.check_cache import CheckCache
from adapters.policy.compiled import CompiledRevision, Evaluation, Evaluator, compile_revision
from adapters.policy.eval_pool import EvaluationPool
from adapters.policy.reload import PolicyReloader, ReloadCounts
from adapters.policy.shared_revisions import SharedRevisions
from adapters.policy.source import PolicySource, read_policy_dir
from gateway.config import PolicyConfig
from gateway.errors import PolicyUnavailable
from gateway.ports import EngineReadiness, EngineResult, EvaluationQueue, EvaluationQueueStats

logger = logging.getLogger("tollgate.policy")


class RegoEngine:
    name = "rego"

    def __init__(
        self, compiled: CompiledRevision, config: PolicyConfig, shared: SharedRevisions | None = None
    ) -> None:
        self._compiled = compiled
        self._pool = EvaluationPool(
            config.eval_threads,
            max_abandoned=config.eval_abandoned_max,
            max_waiting=config.eval_queue_max,
            name="tollgate-rego",
        )
        self._thread_state = threading.local()
        self._reloader = PolicyReloader(
            config.dir,
            config.entrypoint,
            shared or SharedRevisions.for_config(config),
            lambda: self._compiled,
            self._swap,
            config.reload_interval_s,
            CheckCache.for_config(config),
        )
        self._watcher: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, config: PolicyConfig) -> RegoEngine:
        """Load the policy, then watch its directory for edits.

        The revision announced to this machine's workers is loaded, not compiled, when the
        directory holds it (`tollgate serve` checks and announces it before it starts any
        worker) or holds an edit already refused (a restarted worker joins the others).
        Otherwise the directory is compiled as it is, and when another revision is announced
        the watcher's first look settles which one the machine serves. Raises
        PolicyLoadError when the directory is missing or its policy does not compile.
        """
        shared = await asyncio.to_thread(SharedRevisions.for_config, config)
        source = await asyncio.to_thread(read_policy_dir, config.dir)
        compiled = await asyncio.to_thread(_announced_revision, shared, source)
        if compiled is None:
            compiled = await asyncio.to_thread(compile_revision, source, config.entrypoint)
        engine = cls(compiled, config, shared)
        if compiled.revision == source.revision and shared.announced() in (None, source.revision):
            await engine._reloader.prime()
        engine._watcher = asyncio.create_task(engine._reloader.run(), name="tollgate-policy-reload")
        return engine

    @property
    def revision(self) -> str:
        return self._compiled.revision

    @property
    def cacheable(self) -> bool:
        return self._compiled.cacheable

    @property
    def reload_counts(self) -> ReloadCounts:
        return self._reloader.counts

    async def evaluate(self, input_doc: dict[str, Any]) -> EngineResult:
        compiled = self._compiled
        payload = orjson.dumps(input_doc).decode()
        result = await self._pool.run(lambda: self._evaluate_in_thread(compiled, payload))
        if result.failed:
            # As OPA answers an evaluation error (a rule conflict): no decision, 503, not a deny.
            logger.error(
                "policy evaluation failed", extra={"revision": compiled.revision, "why": result.error}
            )
            raise PolicyUnavailable(
                f"The policy could not be evaluated ({result.error}); the request was refused."
            )
        return EngineResult(result.value, compiled.revision, None, result.error)

    async def readiness(self) -> EngineReadiness:
        if self._pool.stuck:
            return EngineReadiness(
                False, "every policy evaluation thread is busy with an evaluation that outlived the timeout"
            )
        return EngineReadiness(True, f"the embedded policy is loaded (revision {self._compiled.revision})")

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        self._pool.close()

    def queue_stats(self) -> EvaluationQueueStats:
        return self._pool.stats()

    def evaluation_queue(self) -> EvaluationQueue:
        return self._pool

    def _swap(self, compiled: CompiledRevision) -> None:
        self._compiled = compiled

    def _evaluate_in_thread(self, compiled: CompiledRevision, payload: str) -> Evaluation:
        evaluator: Evaluator | None = getattr(self._thread_state, "evaluator", None)
        if evaluator is None or evaluator.compiled is not compiled:
            evaluator = compiled.evaluator()
            self._thread_state.evaluator = evaluator
        return evaluator.evaluate(payload)


def _announced_revision(shared: SharedRevisions, source: PolicySource) -> CompiledRevision | None:
    """The announced revision, when the directory holds it or an edit already refused."""
    announced = shared.announced()
    verdict = shared.verdict(announced) if announced is not None else None
    if verdict is None or not verdict.ok:
        return None
    if announced != source.revision:
        own = shared.verdict(source.revision)
        if own is None or own.ok:
            return None
    return shared.load(verdict)
