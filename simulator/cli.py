"""``tollgate sim`` / ``python -m simulator``: run the simulator until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Callable

from simulator.capacity import parse_spec
from simulator.config import SimConfig
from simulator.profiles import DEFAULT_PROFILE, PROFILES
from simulator.server import Simulator


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tollgate sim", description="Upstream LLM simulator (OpenAI + Workers AI)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=int, default=8081, help="replica i listens on port + i (0 = free ports)"
    )
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.0)
    parser.add_argument("--decode-ms-per-token", type=float, default=0.0)
    parser.add_argument("--block-tokens", type=int, default=16)
    parser.add_argument("--cache-blocks", type=int, default=4096)
    parser.add_argument("--workers-ai-replicas", type=int, default=4)
    parser.add_argument("--default-reply-tokens", type=int, default=16)
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"server profile, or one per replica comma-separated ({', '.join(PROFILES)})",
    )
    parser.add_argument(
        "--cache-report",
        action="store_true",
        help="vllm/sglang: report cached tokens (--enable-prompt-tokens-details / --enable-cache-report)",
    )
    parser.add_argument(
        "--capacity", default="", help="429 windows in seconds from the start: START-END[:CODE],..."
    )
    parser.add_argument("--capacity-repeat-s", type=float, default=None, help="the windows repeat this often")
    parser.add_argument("--queue-polls", type=int, default=1, help="polls an async batch stays 'queued'")
    parser.add_argument("--running-polls", type=int, default=1, help="then polls it stays 'running'")
    parser.add_argument(
        "--api-key", default=os.environ.get("TOLLGATE_SIM_API_KEY"), help="default: $TOLLGATE_SIM_API_KEY"
    )
    return parser


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop  # optional speed-up
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def _serve(config: SimConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Simulator(config) as sim:
        for index, url in enumerate(sim.urls):
            print(f"tollgate-sim replica {index} ({config.replica_profile(index).name}): {url}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, serve until SIGINT/SIGTERM, return the exit status (0)."""
    args = _parser().parse_args(argv)
    try:
        config = SimConfig(
            host=args.host,
            port=args.port,
            replicas=args.replicas,
            prefill_s_per_token=args.prefill_ms_per_token / 1000.0,
            decode_s_per_token=args.decode_ms_per_token / 1000.0,
            block_tokens=args.block_tokens,
            cache_blocks=args.cache_blocks,
            api_key=args.api_key or None,
            workers_ai_replicas=args.workers_ai_replicas,
            default_reply_tokens=args.default_reply_tokens,
            profiles=tuple(p.strip() for p in args.profile.split(",")),
            cache_report=args.cache_report,
            capacity=parse_spec(args.capacity),
            capacity_repeat_s=args.capacity_repeat_s,
            queue_polls=args.queue_polls,
            running_polls=args.running_polls,
        )
    except ValueError as exc:
        _parser().error(str(exc))
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve(config))
    return 0
