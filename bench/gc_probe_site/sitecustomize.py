"""Loaded only into the gateway `bench.doors_probe` starts (its PYTHONPATH): counts the
worker's gc collections and the CPU they take, and writes them to $TG_GC_PROBE on SIGUSR1.

With $TG_DOOR_TIMING set, it also times each door's own work inside that worker: every
door's `request`, `response` and `stream`, and its stream encoder's `chunk` and `done`, in
the calling thread's CPU time (`time.thread_time_ns`, so time the worker spends preempted is
not counted). Each timed call costs two clock reads, the same number for every door."""

import functools
import gc
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

_PATH = os.environ.get("TG_GC_PROBE")
if _PATH:
    _counts: dict[str, Any] = {"collections": [0, 0, 0], "ns": [0, 0, 0], "doors": {}}
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

    def _timed(cls: type, name: str, is_async: bool) -> None:
        """`cls.name` wrapped: its calls' CPU ns added to _counts["doors"]["Class.name"]."""
        method: Callable[..., Any] = getattr(cls, name)
        total = _counts["doors"].setdefault(f"{cls.__name__}.{name}", [0, 0])  # ns, calls
        clock = time.thread_time_ns

        # The doors' coroutines do not suspend on the bench's requests, but for a stored
        # response's `done`, whose figure then holds what the event loop did while it waited
        if is_async:

            @functools.wraps(method)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = clock()
                try:
                    return await method(*args, **kwargs)
                finally:
                    total[0] += clock() - started
                    total[1] += 1

            setattr(cls, name, timed_async)
            return

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return method(*args, **kwargs)
            finally:
                total[0] += clock() - started
                total[1] += 1

        setattr(cls, name, timed)

    if os.environ.get("TG_DOOR_TIMING"):
        from gateway.doors.messages import MessagesDoor
        from gateway.doors.messages_stream import MessagesStream
        from gateway.doors.openai import OpenAIDoor, OpenAIStream
        from gateway.doors.responses import ResponsesDoor
        from gateway.doors.responses_stream import ResponsesStream

        for door in (OpenAIDoor, ResponsesDoor, MessagesDoor):
            _timed(door, "request", True)
            _timed(door, "response", True)
            _timed(door, "stream", False)
        for encoder in (OpenAIStream, ResponsesStream, MessagesStream):
            _timed(encoder, "chunk", False)
            _timed(encoder, "done", True)

    gc.callbacks.append(_callback)
    signal.signal(signal.SIGUSR1, _dump)
