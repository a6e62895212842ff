"""Pooled random ids: the format asked for, never one handed out twice (across refills,
threads, and a fork, whose child must not reuse what its parent read)."""

from __future__ import annotations

import os
import re
import threading

import pytest

from gateway.random_ids import random_hex


@pytest.mark.parametrize("nbytes", [12, 16, 24])
def test_ids_are_hex_of_the_size_asked_and_never_repeat(nbytes: int) -> None:
    ids = [random_hex(nbytes) for _ in range(5000)]  # many 4 KiB reads
    assert all(re.fullmatch(f"[0-9a-f]{{{2 * nbytes}}}", value) for value in ids)
    assert len(set(ids)) == len(ids)
    assert len({value[:8] for value in ids}) > len(ids) * 0.99  # not a counter: random digits


def test_threads_never_share_an_id() -> None:
    taken: list[list[str]] = [[] for _ in range(8)]

    def take(into: list[str]) -> None:
        for _ in range(3000):
            into.append(random_hex(16))

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [value for into in taken for value in into]
    assert len(set(everything)) == len(everything) == 24_000


def test_a_forked_child_never_hands_out_its_parents_ids() -> None:
    random_hex(16)  # the parent's pool now holds ids it has not handed out
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's own coverage is not collected)
        try:
            os.write(write_end, ",".join(random_hex(16) for _ in range(100)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        childs = set(pipe.read().decode().split(","))
    os.waitpid(child, 0)
    parents = {random_hex(16) for _ in range(100)}
    assert len(childs) == 100
    assert not childs & parents
