"""Loaded only into the gateway `bench.doors_probe` starts (its PYTHONPATH): counts the
worker's gc collections and the CPU they take, and writes them to $TG_GC_PROBE on SIGUSR1."""

import gc
import json
import os
import signal
import time
from typing import Any

_PATH = os.environ.get("TG_GC_PROBE")
if _PATH:
    _counts: dict[str, Any] = {"collections": [0, 0, 0], "ns": [0, 0, 0]}
    _started = [0]

    def _callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _started[0] = time.thread_time_ns()
            return
        generation = info["generation"]
        _counts["collections"][generation] += 1
        _counts["ns"][generation] += time.thread_time_ns() - _started[0]

    def _dump(signum: int, frame: Any) -> None:
        with open(f"{_PATH}.tmp", "w") as out:
            json.dump(_counts, out)
        os.replace(f"{_PATH}.tmp", str(_PATH))

    gc.callbacks.append(_callback)
    signal.signal(signal.SIGUSR1, _dump)
