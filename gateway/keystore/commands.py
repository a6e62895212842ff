"""`tollgate keys create --store | list | revoke | rotate`: live keys from the command line,
on the config's state store, with the same checks and audit records as /admin/keys (the
credential named is `cli:<user>`)."""

from __future__ import annotations

import getpass
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from gateway.config import BudgetConfig, ConfigError, RateLimitConfig
from gateway.errors import GatewayError
from gateway.keystore.cache import now_ms
from gateway.keystore.operations import KeyOperations, KeySpec, RotateSpec, view

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
_BUDGET = re.compile(r"^(day|month):(usd|tokens)=(\d+(?:\.\d+)?)(?::(hard|soft))?$")


def who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def duration_s(text: str, option: str) -> float:
    """`90`, `90s`, `15m`, `12h`, `30d`."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ConfigError(f"{option}: {text!r} is not a duration (e.g. 90s, 15m, 12h, 30d)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def budget(text: str) -> BudgetConfig:
    """`day:usd=5`, `month:tokens=2000000:soft`."""
    match = _BUDGET.match(text.strip())
    if match is None:
        raise ConfigError(f"--budget: {text!r} is not WINDOW:UNIT=AMOUNT[:hard|soft] (e.g. day:usd=5)")
    window, unit, amount, kind = match.groups()
    value: dict[str, Any] = {"window": window, "kind": kind or "hard"}
    value[unit] = float(amount) if unit == "usd" else int(float(amount))
    return BudgetConfig.model_validate(value)


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"--labels: {text!r} is not NAME=VALUE (e.g. team=search)")
    return name.strip(), value.strip()


async def create(
    operations: KeyOperations,
    tenant: str,
    label: str,
    labels: Sequence[str],
    expires_in: str | None,
    workflow: str | None,
    priority: str | None,
    budgets: Sequence[str],
    rpm: int | None,
    tpm: int | None,
) -> int:
    rates = RateLimitConfig(requests_per_minute=rpm, tokens_per_minute=tpm) if rpm or tpm else None
    spec = KeySpec(
        tenant=tenant,
        label=label,
        labels=dict(_pair(text) for text in labels),
        expires_in_s=duration_s(expires_in, "--expires-in") if expires_in else None,
        workflow=workflow,
        priority=priority,
        budgets=[budget(b) for b in budgets],
        rate_limits=rates,
    )
    secret, key = await operations.create(spec, who())
    print(secret)
    print(f"The key above is shown once. Stored as live key {key.id} (tenant {key.tenant}).", file=sys.stderr)
    return 0


async def listing(operations: KeyOperations, tenant: str | None, as_json: bool) -> int:
    keys = await operations.listing(tenant)
    now = now_ms()
    if as_json:
        print(orjson.dumps({"object": "list", "data": [view(k, now) for k in keys]}).decode())
        return 0
    print(f"{'ID':<14}{'TENANT':<16}{'STATE':<9}{'EXPIRES':<26}LABEL")
    for key in keys:
        shown = view(key, now)
        print(f"{key.id:<14}{key.tenant:<16}{shown['state']:<9}{shown['expires_at'] or '-':<26}{key.label}")
    return 0


async def revoke(operations: KeyOperations, key_id: str) -> int:
    key = await operations.revoke(key_id, who())
    print(f"Key {key.id} (tenant {key.tenant}) is revoked; every gateway refuses it within a second.")
    return 0


async def rotate(operations: KeyOperations, key_id: str, overlap: str, expires_in: str | None) -> int:
    spec = RotateSpec(
        overlap_s=duration_s(overlap, "--overlap"),
        expires_in_s=duration_s(expires_in, "--expires-in") if expires_in else None,
    )
    secret, old, new = await operations.rotate(key_id, spec, who())
    print(secret)
    print(
        f"The key above is shown once. It is live key {new.id}, replacing {old.id}, which works until "
        f"{view(old, now_ms())['expires_at']}.",
        file=sys.stderr,
    )
    return 0


async def run(command: Callable[[], Awaitable[int]]) -> int:
    """A command's exit code; a refusal (unknown key, bad value, store down) is printed, 1."""
    try:
        return await command()
    except GatewayError as exc:
        print(f"tollgate: {exc.message}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        print(f"tollgate: {where}: {first['msg']}", file=sys.stderr)
        return 1
