"""`tollgate sessions list|show`: session records read from the configured state store."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import orjson

from gateway.config import GatewayConfig, StateConfig, config_path_from_env
from gateway.errors import GatewayError, StateStoreUnavailable
from gateway.ports import StateStore
from gateway.sessions.records import SESSION_SORTS
from gateway.sessions.views import document, listing_query
from gateway.stages.admit import scoped_session_key


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = commands.add_parser("sessions", help="session records: list, or show one")
    sub = sessions.add_subparsers(dest="sessions_command", required=True)
    listing = sub.add_parser("list", help="the sessions of every tenant, or of --tenant")
    listing.add_argument("--config", default=config_path_from_env(), help="config file (YAML)")
    listing.add_argument("--tenant", action="append", help="repeatable; default: every tenant")
    listing.add_argument("--sort", choices=SESSION_SORTS, default="last_seen")
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="one session: the id the client sent, with its tenant")
    show.add_argument("session_id")
    show.add_argument("--config", default=config_path_from_env(), help="config file (YAML)")
    show.add_argument("--tenant", required=True)


def run(args: argparse.Namespace, config: GatewayConfig, store: StateStore) -> int:
    async def query() -> Any:
        try:
            if args.sessions_command == "show":
                key = scoped_session_key(args.tenant, args.session_id)
                record = await store.session(args.tenant, key)
                return document(record) if record is not None else None
            query = "&".join(
                [*(f"tenant={t}" for t in args.tenant or ()), f"sort={args.sort}", f"limit={args.limit}"]
            )
            tenants, sort, limit = listing_query(query, list(config.tenants))
            return [document(r) for r in await store.sessions(tenants, sort, limit)]
        finally:
            await store.aclose()

    try:
        found = asyncio.run(query())
    except StateStoreUnavailable as exc:
        print(f"tollgate: {exc.failure}", file=sys.stderr)
        return 1
    except GatewayError as exc:
        print(f"tollgate: {exc.message}", file=sys.stderr)
        return 1
    if found is None:
        print("tollgate: no such session", file=sys.stderr)
        return 1
    if args.sessions_command == "show" or args.json:
        print(orjson.dumps(found, option=orjson.OPT_INDENT_2).decode())
        return 0
    print(f"{'tenant':<12} {'session key':<34} {'turns':>6} {'tokens':>10} {'spend $':>10}  last seen")
    for doc in found:
        usage = doc["usage"]
        tokens = usage["input_tokens"] + usage["output_tokens"]
        print(
            f"{doc['tenant']:<12} {doc['session_key']:<34} {doc['turns']:>6} {tokens:>10} "
            f"{doc['spend_usd']:>10.4f}  {doc['last_seen']}"
        )
    return 0


def state_of(config: GatewayConfig) -> StateConfig:
    """The store sessions use: the configured one, else the embedded default."""
    return config.state or StateConfig()
