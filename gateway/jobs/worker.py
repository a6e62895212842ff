"""`tollgate jobs-worker`: a process that runs async jobs and serves no HTTP.

Jobs share a gateway worker's event loop with its synchronous requests; where interactive
latency matters most, run the gateways with `jobs.pull: false` (they accept jobs, governed
at submission as always) and one or more of these beside them, at a lower OS priority
(`--nice`, or `--idle`: Linux's SCHED_IDLE, run only when nothing else wants the CPU), so the
kernel gives the gateways the CPU first. Same config file, same stores:
the worker builds the same pipeline and pulls from the same job store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

from gateway.config import GatewayConfig, load_config

logger = logging.getLogger("tollgate.jobs")


class _NoSyncLoad:
    """This process serves no synchronous calls; its pull gate waits for the gateways' (the host
    load file, gateway/jobs/host_load.py)."""

    in_flight = 0

    async def idle(self) -> None:
        return None

    def watch(self, listener: Callable[[int], None]) -> None:
        return None


def lower_priority(nice: int, idle: bool) -> str:
    """This process's CPU priority lowered: SCHED_IDLE with `idle` where the OS offers it
    (else the lowest nice level), else `nice` added to its nice level. What was set, for the log."""
    if idle:
        if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
            try:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                return "SCHED_IDLE"
            except OSError as exc:
                logger.warning("SCHED_IDLE refused (%s): nice 19 instead", exc)
        os.nice(19 - os.nice(0))
        return "nice 19"
    if nice:
        os.nice(nice)
    return f"nice {os.nice(0)}"


def run_jobs_worker(config_path: str, nice: int = 0, idle: bool = False) -> int:
    from gateway.logs import configure_logging
    from gateway.redaction.settings import scrubber_for

    config = load_config(config_path)
    configure_logging(config.server.log_level, scrubber_for(config))
    if config.jobs is None:
        logger.error("the config has no `jobs:` block: there are no jobs to run")
        return 2
    priority = lower_priority(nice, idle)
    jobs = config.jobs.model_copy(update={"pull": True})
    asyncio.run(_work(config.model_copy(update={"jobs": jobs}), priority))
    return 0


async def _work(config: GatewayConfig, priority: str) -> None:
    from gateway.app import build_services  # the composition root, as a gateway worker builds it

    services = await build_services(config)()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        assert services.attach_load is not None  # jobs are configured
        services.attach_load(_NoSyncLoad())
        logger.info("jobs worker running at %s", priority, extra={"pid": os.getpid()})
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await services.close()
