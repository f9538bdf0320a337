"""The event loop this process's stream consumers run on, for the in-memory channel layer.

The in-memory layer is not thread-safe and reaches only consumers of this process, so the hint
publisher (``openrath_project.publisher``, an adapter the entry points install) hands each
``group_send`` to the loop the consumers run on: the last one a consumer noted on connect (one
loop per process under uvicorn). With Redis the publisher needs none of this.
"""

from __future__ import annotations

import asyncio
import weakref

_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None


def note_consumer_loop() -> None:
    """Called by consumers on connect, inside their running loop."""
    global _loop
    _loop = weakref.ref(asyncio.get_running_loop())


def consumer_loop() -> asyncio.AbstractEventLoop | None:
    """The loop a consumer last noted, while it exists (``None`` before any consumer)."""
    return _loop() if _loop is not None else None
