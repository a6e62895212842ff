"""`tollgate jobs-worker`: a process that runs async jobs and serves no HTTP.

Jobs share a gateway worker's event loop with its synchronous requests; where interactive
latency matters most, run the gateways with `jobs.pull: false` (they accept jobs, governed
at submission as always) and one or more of these beside them, at a lower OS priority
(`--nice`), so the kernel gives the gateways the CPU first. Same config file, same stores:
the worker builds the same pipeline and pulls from the same job store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from gateway.config import GatewayConfig, load_config

logger = logging.getLogger("tollgate.jobs")


class _NoSyncLoad:
    """This process serves no synchronous calls: the pull gate never waits for them."""

    in_flight = 0

    async def idle(self) -> None:
        return None


def run_jobs_worker(config_path: str, nice: int = 0) -> int:
    from gateway.logs import configure_logging
    from gateway.redaction.settings import scrubber_for

    config = load_config(config_path)
    configure_logging(config.server.log_level, scrubber_for(config))
    if config.jobs is None:
        logger.error("the config has no `jobs:` block: there are no jobs to run")
        return 2
    if nice:
        os.nice(nice)
    jobs = config.jobs.model_copy(update={"pull": True})
    asyncio.run(_work(config.model_copy(update={"jobs": jobs})))
    return 0


async def _work(config: GatewayConfig) -> None:
    from gateway.app import build_services  # the composition root, as a gateway worker builds it

    services = await build_services(config)()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        assert services.attach_load is not None  # jobs are configured
        services.attach_load(_NoSyncLoad())
        logger.info("jobs worker running", extra={"pid": os.getpid()})
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await services.close()
