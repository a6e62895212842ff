"""A throwaway three-node Redis Cluster on loopback, for the state store's cluster tests."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.processes import START_TIMEOUT_S, start_group, stop_group


@dataclass
class Cluster:
    ports: list[int]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port)

    def node_id(self, port: int) -> str:
        with self.client(port) as client:
            return str(client.execute_command("CLUSTER", "MYID").decode())

    def owner(self, tag: str) -> int:
        """The port of the node serving the slot of hash tag `tag`."""
        slot = key_slot(tag.encode())
        with self.client(self.ports[0]) as client:
            for first, last, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if first <= slot <= last:
                    return int(primary[1])
        raise AssertionError(f"no node serves slot {slot}")

    def keys(self, port: int, pattern: str) -> list[bytes]:
        with self.client(port) as client:
            return list(client.scan_iter(match=pattern, count=1000))

    def moved_errors(self, port: int) -> int:
        """How many MOVED redirections the node has answered."""
        with self.client(port) as client:
            stats = client.info("errorstats")
        return int(stats.get("errorstat_MOVED", {}).get("count", 0))

    def start_migration(self, tag: str, source: int, target: int) -> None:
        """Marks the tag's slot migrating from `source` to `target` and moves its keys there:
        the source now answers ASK for them."""
        slot = key_slot(tag.encode())
        with self.client(target) as to, self.client(source) as src:
            to.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
            keys = [k for k in src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10_000)]
            if keys:
                src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)

    def finish_migration(self, tag: str, target: int) -> None:
        """Gives the slot to `target` on every node: the others now answer MOVED."""
        slot = key_slot(tag.encode())
        target_id = self.node_id(target)
        for port in self.ports:
            with self.client(port) as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """Ports free with their cluster-bus port (10,000 higher, so at most 55,535)."""
    chosen: list[int] = []
    rng = random.Random()
    while len(chosen) < n:
        port = rng.randrange(20_000, 45_000)
        if port not in chosen and _free(port) and _free(port + 10_000):
            chosen.append(port)
    return chosen


def _ok(port: int) -> bool:
    try:
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=1) as client:
            info = client.execute_command("CLUSTER", "INFO").decode()
            return "cluster_state:ok" in info
    except redis.RedisError:
        return False


@contextmanager
def redis_cluster(directory: Path) -> Iterator[Cluster]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise RuntimeError("redis-server and redis-cli are needed (apt-get install -y redis-server)")
    ports = _free_ports(3)
    processes = []
    try:
        for port in ports:
            node_dir = directory / str(port)
            node_dir.mkdir(parents=True)
            argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir)]
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            argv += ["--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no"]
            processes.append(start_group(argv))
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in ports:
            while True:
                try:
                    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=1) as client:
                        client.ping()
                    break
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        nodes = [f"127.0.0.1:{p}" for p in ports]
        subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        while not all(_ok(port) for port in ports):
            if time.monotonic() > deadline + START_TIMEOUT_S:
                raise RuntimeError("the Redis Cluster did not come up")
            time.sleep(0.1)
        yield Cluster(ports)
    finally:
        for process in processes:
            stop_group(process)
