"""The Redis store's wire to a Redis Cluster: each command goes to the node serving its key.

The slot map comes from `CLUSTER SLOTS`, asked of the seed node of `state.redis_url` (or of
any node known since). A command goes to its key's slot's primary, over that node's own
pipelined connection (`redis_wire.RedisWire`). Redirections are followed: `MOVED` (the slot
has a new owner: the map is reloaded before the next command) and `ASK` (the slot is being
migrated: the command is sent once to the importing node, after `ASKING`), and `TRYAGAIN`
(a script's keys are split between the two nodes of a migrating slot: tried again after a
pause, within the store's timeout). All three mean the command was not run, so sending it
again is no exception to the rule that a command that may have reached Redis is never sent
twice. A node that fails fails its commands (StateStoreUnavailable) and has the map reloaded
before the next command, since the cluster may have promoted a replica in its place.

Every key of a script carries its tenant's hash tag (`redis.py`), so a script's keys are in
one slot. Replicas are not read from: every command here writes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from adapters.state.redis_wire import RedisWire, ReplyError, Script, run_script, unavailable

_MAX_REDIRECTIONS = 5
_FIRST_PAUSE_S = 0.01  # then 0.02, 0.04...: TRYAGAIN is retried within the store's timeout
Address = tuple[str, int]


def open_wire(url: str, timeout_s: float, cluster: bool) -> RedisWire | RedisClusterWire:
    """The connection to a Redis server, or to a Redis Cluster through one of its nodes."""
    return RedisClusterWire(url, timeout_s) if cluster else RedisWire(url, timeout_s)


class RedisClusterWire:
    def __init__(self, url: str, timeout_s: float) -> None:
        seed = RedisWire(url, timeout_s)
        if seed.unix_path is not None:
            raise ValueError("state.redis_url: a Redis Cluster is reached over TCP, not a unix socket")
        if seed.db:
            raise ValueError("state.redis_url: a Redis Cluster has only database 0")
        self._seed = seed
        self._timeout_s = timeout_s
        self.describe = f"the cluster seen from {seed.describe}"
        self._nodes: dict[Address, RedisWire] = {seed.address: seed}
        self._slots: list[Address] = []  # slot -> its primary; empty until loaded
        self._stale = True
        self._refresh_lock = asyncio.Lock()

    async def call(self, *args: str | bytes | int) -> Any:
        """One command, sent to the node of its key (its first argument after the name)."""
        key = args[1] if len(args) > 1 else None
        return await self._routed(key, args)

    async def script(self, script: Script, keys: tuple[str, ...], args: tuple[str | bytes | int, ...]) -> Any:
        async def call(*command: str | bytes | int) -> Any:
            return await self._routed(keys[0] if keys else None, command)

        return await run_script(call, self.describe, script, keys, args)

    async def transaction(self, key: str, commands: tuple[tuple[str | bytes | int, ...], ...]) -> Any:
        """`commands` (of `key`'s slot) in one MULTI ... EXEC on the node holding it, as
        `RedisWire.transaction`; a slot moved or migrating comes back as its ReplyError (MOVED,
        ASK), for the caller to take the way that follows redirections (a script)."""
        if self._stale or not self._slots:
            await self._refresh()
        try:
            reply = await self._node(self._slots[_slot(key)]).transaction(key, commands)
        except Exception:
            self._stale = True  # a failover may have moved its slots
            raise
        if isinstance(reply, ReplyError) and str(reply).startswith("MOVED "):
            self._stale = True
        return reply

    async def _routed(self, key: str | bytes | int | None, command: tuple[str | bytes | int, ...]) -> Any:
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._timeout_s
        pause = _FIRST_PAUSE_S
        while True:
            if self._stale or not self._slots:
                await self._refresh()
            node = self._node(self._slots[0 if key is None else _slot(key)])  # PING: any node answering
            asking, redirections = False, 0
            while True:
                try:
                    reply = await (node.call_asking(*command) if asking else node.call(*command))
                except Exception:
                    self._stale = True  # a failover may have moved its slots
                    raise
                text = str(reply) if isinstance(reply, ReplyError) else ""
                if not text.startswith(("MOVED ", "ASK ")):
                    break
                redirections += 1
                if redirections > _MAX_REDIRECTIONS:
                    raise unavailable(self.describe, ConnectionError("too many redirections"))
                slot, address = _redirection(text)
                if text.startswith("MOVED "):
                    self._slots[slot] = address
                    self._stale = True  # one slot moved: others likely did too
                node, asking = self._node(address), text.startswith("ASK ")
            # TRYAGAIN: a script's keys are split between two nodes while their slot migrates.
            # Not run; the migration usually ends within milliseconds.
            if not text.startswith("TRYAGAIN") or loop.time() + pause > give_up_at:
                return reply
            await asyncio.sleep(pause)
            pause *= 2

    def _node(self, address: Address) -> RedisWire:
        node = self._nodes.get(address)
        if node is None:
            node = self._nodes[address] = self._seed.at(*address)
        return node

    async def _refresh(self) -> None:
        async with self._refresh_lock:
            if not self._stale and self._slots:
                return
            failures: list[BaseException] = []
            for node in [self._seed, *(n for n in self._nodes.values() if n is not self._seed)]:
                try:
                    reply = await node.call("CLUSTER", "SLOTS")
                except Exception as exc:  # this node is down: ask the next
                    failures.append(exc)
                    continue
                if isinstance(reply, ReplyError):
                    failures.append(reply)
                    continue
                self._slots = _slot_map(reply, node.address)
                self._stale = False
                return
            raise unavailable(self.describe, failures[-1] if failures else ConnectionError("no node"))

    async def aclose(self) -> None:
        await asyncio.gather(*(node.aclose() for node in self._nodes.values()))


def _slot(key: str | bytes | int) -> int:
    return int(key_slot(key if isinstance(key, bytes) else str(key).encode()))


def _redirection(text: str) -> tuple[int, Address]:
    """'MOVED 3999 127.0.0.1:6381' -> (3999, ('127.0.0.1', 6381))."""
    _, slot, where = text.split(" ", 2)
    host, _, port = where.rpartition(":")
    return int(slot), (host, int(port))


def _slot_map(reply: list[Any], asked: Address) -> list[Address]:
    """CLUSTER SLOTS -> the primary of every slot. A node announcing no address is the one
    asked; a slot no node serves is sent to the node asked, which answers with an error."""
    slots = [asked] * REDIS_CLUSTER_HASH_SLOTS
    for entry in reply:
        first, last, primary = int(entry[0]), int(entry[1]), entry[2]
        host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0] or "")
        address = (host or asked[0], int(primary[1]))
        slots[first : last + 1] = [address] * (last - first + 1)
    return slots
