"""The embedded policy engine: the policy directory evaluated in process by regopy.

Evaluations run off the event loop, in a small pool of threads with one interpreter per
thread (regopy releases the GIL while it evaluates); an evaluation that outlives the
policy timeout gives its thread up to a fresh one (adapters.policy.eval_pool). The serving
revision is one immutable object swapped whole on reload, so an evaluation in flight
finishes on the revision it started with.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson

from adapters.policy.compiled import CompiledRevision, Evaluation, Evaluator, compile_revision
from adapters.policy.eval_pool import EvaluationPool, EvaluationQueueStats
from adapters.policy.reload import PolicyReloader, ReloadCounts
from adapters.policy.source import read_policy_dir
from gateway.config import PolicyConfig
from gateway.ports import EngineReadiness, EngineResult


class RegoEngine:
    name = "rego"

    def __init__(self, compiled: CompiledRevision, config: PolicyConfig) -> None:
        self._compiled = compiled
        self._pool = EvaluationPool(
            config.eval_threads,
            max_abandoned=config.eval_abandoned_max,
            max_waiting=config.eval_queue_max,
            name="tollgate-rego",
        )
        self._thread_state = threading.local()
        self._reloader = PolicyReloader(
            config.dir, config.entrypoint, lambda: self._compiled, self._swap, config.reload_interval_s
        )
        self._watcher: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, config: PolicyConfig) -> RegoEngine:
        """Load and compile the policy directory, then watch it for edits.

        The policy's tests are not run here: `tollgate serve` runs them once, in a child
        process, before it starts any worker (each worker would otherwise spend seconds on
        them), and every later edit is checked in full before it is served. Raises
        PolicyLoadError when the directory is missing or its policy does not compile.
        """
        source = await asyncio.to_thread(read_policy_dir, config.dir)
        compiled = await asyncio.to_thread(compile_revision, source, config.entrypoint)
        engine = cls(compiled, config)
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

    def _swap(self, compiled: CompiledRevision) -> None:
        self._compiled = compiled

    def _evaluate_in_thread(self, compiled: CompiledRevision, payload: str) -> Evaluation:
        evaluator: Evaluator | None = getattr(self._thread_state, "evaluator", None)
        if evaluator is None or evaluator.compiled is not compiled:
            evaluator = compiled.evaluator()
            self._thread_state.evaluator = evaluator
        return evaluator.evaluate(payload)
