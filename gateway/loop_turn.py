"""One turn of the event loop, as `await asyncio.sleep(0)` gives, for the compiled request
path: `asyncio.sleep` is Python (a coroutine and a generator made and run, about 20 bytecodes
each time), and a request yields up to four times (`cohorts.together` at three phase starts,
a lease's draw). Awaiting `ONE_TURN` runs a compiled generator that yields once: the task
sees a bare yield and runs again on the loop's next turn, as after `sleep(0)`.
"""

from __future__ import annotations

from collections.abc import Generator


class _OneTurn:
    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


ONE_TURN = _OneTurn()
