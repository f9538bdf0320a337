"""Shared reads: the streams of one object in one process read each batch once.

A hint reaches every consumer of the object; they are usually at the same position, so they
would all run the same query. A read is keyed by ``(group, after)``; a consumer may use a read
of another consumer (in flight, or finished a moment ago) when

* the read started after this consumer asked (backfill, periodic catch-up), or
* its result shows what the consumer's hint announced: it reaches the hinted position, or it is
  a partial page (a valid prefix; the consumer goes on from its end).

Otherwise it reads on its own. A wrong hint (a position never committed) can cost extra reads,
never a missed row: the test is on what the read returned, not on what the hint claimed.
Exactly-once is unaffected: each consumer still moves its own ``last_sent`` forward by what
it sends.

Per event loop (futures belong to one loop); uvicorn runs a process's consumers on one loop.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

#: How long a finished read stays usable, and how many reads are remembered at most.
KEEP_SECONDS = 2.0
MAX_ENTRIES = 4096

R = TypeVar("R")


@dataclass
class _Read:
    started: float
    future: asyncio.Future[Any]


class SharedReads:
    """Single-flight reads with a short memory, for one event loop."""

    def __init__(self) -> None:
        self._reads: dict[tuple[str, int], _Read] = {}
        self.started = 0
        self.joined = 0

    async def read(
        self,
        key: tuple[str, int],
        fetch: Callable[[], Awaitable[R]],
        *,
        not_before: float,
        good_enough: Callable[[R], bool] | None = None,
    ) -> R:
        """The result of ``fetch()``, or of another read of ``key`` that started at
        ``not_before`` or later, or whose result passes ``good_enough``."""
        found = self._reads.get(key)
        if found is not None:
            if found.started >= not_before:
                self.joined += 1
                result: R = await asyncio.shield(found.future)
                return result
            if good_enough is not None:
                # A failed read is reported by its own reader; this one then reads on its own.
                outcome: list[R | BaseException] = await asyncio.gather(
                    asyncio.shield(found.future), return_exceptions=True
                )
                settled = outcome[0]
                if not isinstance(settled, BaseException) and good_enough(settled):
                    self.joined += 1
                    return settled
        self._forget_old()
        # Its own task: a reader that goes away (disconnect) does not cancel the others' read.
        task = asyncio.ensure_future(fetch())
        entry = _Read(time.monotonic(), task)
        self._reads.pop(key, None)  # re-inserted at the end: the dict stays in start order
        self._reads[key] = entry
        self.started += 1

        def forget_failed(done: asyncio.Future[Any]) -> None:
            # exception() also marks it retrieved (no "never retrieved" warning).
            if (done.cancelled() or done.exception() is not None) and self._reads.get(key) is entry:
                del self._reads[key]

        task.add_done_callback(forget_failed)
        return await asyncio.shield(task)

    def _forget_old(self) -> None:
        horizon = time.monotonic() - KEEP_SECONDS
        # Insertion order is start order: the oldest come first. Dropping one in flight is
        # harmless: its reader and those already joined hold the future.
        while self._reads:
            key, oldest = next(iter(self._reads.items()))
            if oldest.started >= horizon and len(self._reads) < MAX_ENTRIES:
                break
            del self._reads[key]


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedReads] = (
    weakref.WeakKeyDictionary()
)


def shared_reads() -> SharedReads:
    loop = asyncio.get_running_loop()
    found = _per_loop.get(loop)
    if found is None:
        found = _per_loop[loop] = SharedReads()
    return found
