"""Per-principal WebSocket connection limit (``OPENRATH_MAX_WS_PER_PRINCIPAL``, 4429 beyond it).

Two counters, chosen by ``REDIS_URL``:

* **In memory** (no Redis: the embedded profile, one process): a set of connection ids per
  principal behind a lock. Exact for the process; each process counts only its own sockets.
* **Redis** (production, any number of ASGI processes): one sorted set per principal, member =
  connection id, score = the time the entry expires. Acquiring is one Lua script (drop expired
  entries, count, add when under the limit): atomic across processes. Each consumer refreshes
  its entry on its periodic re-check, so a process that dies without closing its sockets stops
  counting against the limit after ``entry_ttl_seconds()``. If Redis cannot be reached the limit
  is not enforced (logged): the limit protects resources, it is not an access control.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from typing import Any, Protocol

from django.conf import settings

logger = logging.getLogger(__name__)

KEY_PREFIX = "openrath:ws:conns:"
#: Redis connections the counter of one process uses at most.
POOL_SIZE = 20

# KEYS[1] = the principal's set; ARGV = limit, connection id, ttl ms. Redis' clock, not ours.
_ACQUIRE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""

_REFRESH_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""


def max_per_principal() -> int:
    return int(getattr(settings, "OPENRATH_MAX_WS_PER_PRINCIPAL", 50))


def entry_ttl_seconds() -> float:
    """How long a Redis entry outlives its last refresh (three missed re-checks, at least 60s)."""
    return max(60.0, 3 * float(getattr(settings, "OPENRATH_WS_RECHECK_SECONDS", 30)))


class ConnectionLimiter(Protocol):
    async def acquire(self, key: str, connection: str, limit: int) -> bool: ...

    async def refresh(self, key: str, connection: str) -> None: ...

    async def release(self, key: str, connection: str) -> None: ...


class MemoryLimiter:
    """Counts this process's sockets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, set[str]] = {}

    async def acquire(self, key: str, connection: str, limit: int) -> bool:
        with self._lock:
            held = self._open.setdefault(key, set())
            if connection not in held and len(held) >= limit:
                return False
            held.add(connection)
            return True

    async def refresh(self, key: str, connection: str) -> None:
        return None

    async def release(self, key: str, connection: str) -> None:
        with self._lock:
            held = self._open.get(key)
            if held is not None:
                held.discard(connection)
                if not held:
                    del self._open[key]

    def count(self, key: str) -> int:
        with self._lock:
            return len(self._open.get(key, ()))


class RedisLimiter:
    """Counts every process's sockets in Redis (see the module docstring)."""

    def __init__(self, url: str, *, prefix: str = KEY_PREFIX) -> None:
        self.url = url
        self.prefix = prefix
        # redis.asyncio clients are bound to the loop that created them.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> Any:
        import redis.asyncio as aioredis

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            # Blocking: a burst of connects waits for one of a few connections instead of
            # failing (redis-py's plain pool raises beyond its size).
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=POOL_SIZE,
                timeout=5,
                socket_connect_timeout=2,
                socket_timeout=2,
                health_check_interval=30,
            )
            client = aioredis.Redis(connection_pool=pool)
            self._clients[loop] = client
        return client

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _ttl_ms(self) -> int:
        return int(entry_ttl_seconds() * 1000)

    async def acquire(self, key: str, connection: str, limit: int) -> bool:
        try:
            allowed = await self._client().eval(
                _ACQUIRE_LUA, 1, self._key(key), limit, connection, self._ttl_ms()
            )
        except Exception as exc:
            logger.warning("WebSocket limit not enforced: Redis unavailable (%s)", exc)
            return True
        return bool(int(allowed))

    async def refresh(self, key: str, connection: str) -> None:
        try:
            await self._client().eval(_REFRESH_LUA, 1, self._key(key), connection, self._ttl_ms())
        except Exception as exc:
            logger.warning("could not refresh a WebSocket limit entry (%s)", exc)

    async def release(self, key: str, connection: str) -> None:
        try:
            await self._client().zrem(self._key(key), connection)
        except Exception as exc:  # the entry expires on its own
            logger.warning("could not release a WebSocket limit entry (%s)", exc)

    async def count(self, key: str) -> int:
        return int(await self._client().zcard(self._key(key)))


_memory = MemoryLimiter()
_redis: dict[str, RedisLimiter] = {}
_redis_lock = threading.Lock()


def limiter() -> ConnectionLimiter:
    """The counter for this process's configuration (Redis when ``REDIS_URL`` is set)."""
    url = str(getattr(settings, "REDIS_URL", "") or "")
    if not url:
        return _memory
    with _redis_lock:
        found = _redis.get(url)
        if found is None:
            found = _redis[url] = RedisLimiter(url)
        return found


def memory_limiter() -> MemoryLimiter:
    return _memory
