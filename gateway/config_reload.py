"""Config hot reload: the config file (and its keys file) is watched, an edit is checked
whole, and what can change while serving is swapped in; a bad edit is refused and the last
good config keeps serving.

The files are polled (one stat each per `server.config_reload_interval_s`), as the policy
directory is, which also sees Kubernetes ConfigMap symlink swaps. Each worker reads and
checks the file itself: it is small and parsing it costs a few milliseconds, so there is
nothing to share between workers, unlike a policy's test run.

Live (swapped in, for requests that start after the swap; requests in flight finish on the
config they started with):
    keys, keys_file   the keys in the file(s)
    tenants           their models, budgets, rate limits and redaction
    models            aliases and their candidates
    upstreams         added, changed or removed (gateway/routing/live_upstreams.py): an
                      unchanged upstream keeps its connections, circuits and probes
    redaction         the default for tenants without their own
    admin             the operator tokens of /admin/spend and /admin/keys

Restart-only (an edit is logged, names the settings, and waits for the next start; the
rest of the edit is applied when it stands on its own with the running values; `prices`
too, since a settle must price a request as its reservation did):
    server            listen address, workers, limits, timeouts: the sockets and processes
    state, live_keys  the state store's connections
    audit             the decision log's writer and its hash chain
    policy            the engine (the policy directory itself reloads on its own)
    telemetry, routing, prices, metering
Turning metering on or off (a first budget or rate limit, or the last one removed, with no
`state` block) also needs a restart, and so does a change to what runs side by side (an
alias's mirrors, its weighted split, or an upstream a mirror sends to): the edit is refused
until then.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.metering.parts import state_config
from gateway.routing.tables import mirrors_from

logger = logging.getLogger("tollgate.config")

LIVE = ("keys", "keys_file", "tenants", "models", "upstreams", "redaction", "admin", "context_windows")
RESTART_ONLY = (
    "server",
    "state",
    "live_keys",
    "audit",
    "policy",
    "telemetry",
    "routing",
    "prices",
    "metering",
    "jobs",
    "sessions",  # the records' store, cache and summarizer last as long as the process
    "responses",  # the responses store (gateway/doors) is opened once
)

Fingerprint = tuple[tuple[str, int, int, int] | None, ...]


@dataclass(slots=True)
class ReloadCounts:
    reloaded: int = 0  # edits applied
    refused: int = 0  # edits refused: the last good config serves
    restart_pending: int = 0  # edits that changed restart-only settings (the rest applied)
    last_error: str | None = None

    def by_outcome(self) -> dict[str, int]:
        return {"applied": self.reloaded, "refused": self.refused, "restart_pending": self.restart_pending}


class ConfigReloader:
    def __init__(
        self,
        path: str | Path,
        running: GatewayConfig,
        apply: Callable[[GatewayConfig], None],
        interval_s: float,
    ) -> None:
        self._path = Path(path)
        self._running = running
        self._apply = apply
        self._interval_s = interval_s
        self._paths = _watched(self._path, running)
        # None: the first look reads the file and compares it with the running config, so an
        # edit made between the worker's start and its first look is not missed.
        self._seen: Fingerprint | None = None
        self.counts = ReloadCounts()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check_once()
            except Exception:  # the watcher must outlive any one bad edit
                logger.exception("config reload failed", extra={"file": str(self._path)})

    async def check_once(self) -> None:
        seen = await asyncio.to_thread(_fingerprint, self._paths)
        if seen == self._seen:
            return
        try:
            edited = await asyncio.to_thread(load_config, self._path)
        except ConfigError as exc:
            self._refuse(seen, str(exc))
            return
        paths = _watched(self._path, edited)
        now = await asyncio.to_thread(_fingerprint, paths)
        if paths == self._paths and now != seen:
            return  # still being written: look again at the next tick
        self._paths, self._seen = paths, now
        restart = changed_settings(self._running, edited, RESTART_ONLY)
        try:
            effective = live_part(self._running, edited)
        except ConfigError as exc:
            self._refuse(now, str(exc), restart)
            return
        if (state_config(effective) is None) != (state_config(self._running) is None):
            self._refuse(
                now,
                f"{self._path}: this edit turns metering "
                f"{'off' if state_config(effective) is None else 'on'} (the first budget or rate limit, "
                "or the last one, with no `state` block); restart the gateway to apply it",
                restart,
            )
            return
        if side_by_side(effective) != side_by_side(self._running):
            self._refuse(
                now,
                f"{self._path}: this edit changes what runs side by side (an alias's mirrors or weighted "
                "split, or an upstream a mirror sends to); restart the gateway to apply it",
                restart,
            )
            return
        live = changed_settings(self._running, effective, LIVE)
        if live:
            self._apply(effective)
            self._running = effective
            self.counts.reloaded += 1
            self.counts.last_error = None
            logger.info(
                "config reloaded", extra={"file": str(self._path), "changed": live, "pid": os.getpid()}
            )
        if restart:
            self.counts.restart_pending += 1
            logger.warning(
                "config edit touches restart-only settings; they take effect at the next restart "
                "(the running values keep serving)",
                extra={"file": str(self._path), "restart_only": restart, "applied": live},
            )

    def _refuse(self, seen: Fingerprint, why: str, restart: Sequence[str] = ()) -> None:
        self._seen = seen  # refused once, logged once: the next edit is looked at afresh
        self.counts.refused += 1
        self.counts.last_error = why
        extra: dict[str, Any] = {"file": str(self._path), "error": why}
        if restart:
            extra["restart_only"] = list(restart)
        logger.error("config edit refused; the last good config keeps serving", extra=extra)


def live_part(running: GatewayConfig, edited: GatewayConfig) -> GatewayConfig:
    """The running config with the edited live settings, checked whole again (an edited model
    alias must name an upstream that runs, a key a tenant that exists)."""
    edited_data = edited.model_dump(by_alias=True)
    data = {**running.model_dump(by_alias=True), **{name: edited_data[name] for name in LIVE}}
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{item_path(item['loc'])}: {item['msg']}" for item in exc.errors()]
        raise ConfigError(
            "this edit needs a restart: with the running (restart-only) settings it is invalid: "
            + "; ".join(lines)
        ) from None


def side_by_side(config: GatewayConfig) -> tuple[Any, ...]:
    """What the mirror (built once, at start) was made from: each alias's shadows, the aliases
    split by weight, and the settings of the upstreams shadows go to."""
    mirrors = mirrors_from(config)
    splits = sorted(
        alias
        for alias, candidates in config.models.items()
        if sum(c.weight is not None for c in candidates) > 1
    )
    targets = sorted({c.upstream for shadows in mirrors.values() for c, _ in shadows})
    return mirrors, splits, [(name, config.upstreams.get(name)) for name in targets]


def changed_settings(before: GatewayConfig, after: GatewayConfig, names: Sequence[str]) -> list[str]:
    """The settings among `names` that differ, one level down (e.g. `server.port`, `tenants.acme`)."""
    changed: list[str] = []
    for name in names:
        old, new = getattr(before, name), getattr(after, name)
        if old == new:
            continue
        old_data, new_data = _dumped(old), _dumped(new)
        if isinstance(old_data, dict) and isinstance(new_data, dict):
            keys = sorted(set(old_data) | set(new_data), key=str)
            changed.extend(f"{name}.{k}" for k in keys if old_data.get(k) != new_data.get(k))
        else:
            changed.append(name)
    return changed


def item_path(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _dumped(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True)
    if isinstance(value, dict):
        return {k: _dumped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dumped(v) for v in value]
    return value


def _watched(path: Path, config: GatewayConfig) -> tuple[Path, ...]:
    if config.keys_file:
        return (path, (path.parent / config.keys_file).resolve())
    return (path,)


def _fingerprint(paths: Sequence[Path]) -> Fingerprint:
    found: list[tuple[str, int, int, int] | None] = []
    for path in paths:
        try:
            stat = path.stat()  # follows symlinks: a ConfigMap's swap changes the inode
        except OSError:
            found.append(None)
            continue
        found.append((os.path.realpath(path), stat.st_mtime_ns, stat.st_size, stat.st_ino))
    return tuple(found)
