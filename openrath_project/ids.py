"""Identifier helpers: time-ordered UUIDs (RFC 9562 version 7) for index locality.

Pure Python: Python 3.11's ``uuid`` module has no ``uuid7``. Within one process the ids are
strictly increasing (a 12-bit counter in ``rand_a`` orders ids made in the same millisecond,
RFC 9562 section 6.2, method 1); across processes they are ordered by millisecond only.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> uuid.UUID:
    """A version-7 UUID: 48-bit Unix milliseconds, a 12-bit counter, 62 random bits."""
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x1FF  # leave room to count up
        counter = _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= (counter & 0xFFF) << 64  # rand_a used as a counter
    value |= 0b10 << 62  # variant
    value |= rand_b
    return uuid.UUID(int=value)
