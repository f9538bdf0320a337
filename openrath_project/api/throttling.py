"""Rate limits on writes: a token bucket per API token (or console user).

Each principal's bucket holds ``OPENRATH_RATE_LIMIT_BURST`` tokens and refills at
``OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE`` per minute; every write request (POST, PUT, PATCH,
DELETE) takes one. An empty bucket is a 429 with ``Retry-After``. Reads are not limited here
(page sizes are). The buckets live in Redis when ``REDIS_URL`` is set (shared by every web
process, one atomic script per request), in the process otherwise (the embedded profile).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

logger = logging.getLogger(__name__)

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# KEYS[1] = bucket; ARGV = capacity, refill per second, now (seconds). Returns {allowed, wait}.
_REDIS_SCRIPT = """
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local tokens = tonumber(bucket[1]) or capacity
local at = tonumber(bucket[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 60)
return {allowed, tostring(wait)}
"""


class _LocalBuckets:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str, capacity: float, rate: float, now: float) -> tuple[bool, float]:
        with self._lock:
            tokens, at = self._buckets.get(key, (capacity, now))
            tokens = min(capacity, tokens + max(0.0, now - at) * rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return True, 0.0
            self._buckets[key] = (tokens, now)
            return False, (1 - tokens) / rate

    def clear(self) -> None:
        with self._lock:
            self._buckets.clear()


local_buckets = _LocalBuckets()
_redis_lock = threading.Lock()
_redis_script: Any = None


def _bucket_script() -> Any:
    """The bucket script, registered once per process: each request sends its SHA1 (EVALSHA,
    loading it again only after a Redis restart), not its source."""
    global _redis_script
    with _redis_lock:
        if _redis_script is None:
            import redis

            client = redis.Redis.from_url(
                settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
            )
            _redis_script = client.register_script(_REDIS_SCRIPT)
        return _redis_script


def take(key: str) -> tuple[bool, float]:
    """Take one token from ``key``'s bucket: ``(allowed, seconds to wait)``."""
    capacity = float(settings.OPENRATH_RATE_LIMIT_BURST)
    rate = float(settings.OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE) / 60.0
    now = time.time()
    if settings.REDIS_URL:
        try:
            allowed, wait = _bucket_script()(
                keys=[f"openrath:rl:{key}"], args=[capacity, rate, now]
            )
            return bool(int(allowed)), float(wait)
        except Exception as exc:  # Redis away: this process's buckets, never a 500
            logger.warning("rate limit store unavailable, using local buckets: %s", exc)
    return local_buckets.take(key, capacity, rate, now)


class WriteRateThrottle(BaseThrottle):
    """429 with Retry-After when a principal writes faster than its bucket refills."""

    def __init__(self) -> None:
        self._wait = 0.0

    def allow_request(self, request: Request, view: Any) -> bool:
        if request.method not in WRITE_METHODS or settings.OPENRATH_RATE_LIMIT_BURST <= 0:
            return True
        principal = getattr(request._request, "principal", None)
        if principal is None:
            return True  # unauthenticated requests are refused before they cost anything
        key = principal.actor
        allowed, wait = take(key)
        self._wait = wait
        return allowed

    def wait(self) -> float | None:
        return max(1.0, math.ceil(self._wait))
