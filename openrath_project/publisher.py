"""The Channels publisher: turns streaming hooks into channel-layer hints, off the writer's path.

:mod:`sessions_app.streaming` calls its listeners synchronously in the writing thread, right
after a commit. The publisher's listener only puts a small hint on a bounded in-process queue;
a daemon thread drains the queue and calls ``group_send``. A full queue or an unreachable layer
drops the hint (and counts it): hints are only hints, a WebSocket consumer re-reads the database
on the next hint, on its periodic catch-up, or when the client reconnects with ``after=``.

Group messages (``type`` routes them to the consumer's handler):

* ``session.<id>``: ``{"type": "stream.chunks", "first", "last"}`` and
  ``{"type": "stream.delta", "agent", "turn", "delta"}``
* ``run.<id>``: ``{"type": "stream.event", "seq"}``

Layers: with Redis (production) the drain thread keeps its own event loop and any process can
publish. It first asks Redis, in one blocking script call for the whole batch, which of the
batch's groups have a member, and sends only to those: ``group_send`` costs two asynchronous
round trips even for a group nobody listens to, which is what most of a worker's hints are
(about 4 times the check's CPU, measured). A stream joins its group before it reads its
backfill, so a commit whose hint found the group empty is in the backfill of any stream that
joins later. The in-memory layer is not thread-safe and reaches only consumers in this process:
the drain thread hands each ``group_send`` to the event loop the consumers run on (the last
loop a consumer noted, :mod:`openrath_project.ws.consumer_loop`; one loop per process under
uvicorn).

This is the shell's adapter on the streaming port (:mod:`sessions_app.streaming`, which also
names the groups); ASGI, Celery and ``run_worker`` install it with :func:`install_publisher`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.conf import settings

try:  # the Redis layer is an optional extra (``redis``)
    from channels_redis.core import RedisChannelLayer
except ImportError:  # pragma: no cover - without the extra every layer is sent to directly
    RedisChannelLayer = None

from openrath_project.ws.consumer_loop import consumer_loop
from sessions_app import streaming
from sessions_app.streaming import run_group, session_group

logger = logging.getLogger(__name__)

#: Most hints one drain pass takes off the queue (consecutive hints of a group coalesce).
DRAIN_BATCH = 500
#: Longest one ``group_send`` may take before the hint is counted as dropped.
SEND_TIMEOUT_SECONDS = 2.0

#: Drops each group's expired members, as ``group_send`` does first, and counts who is left.
_MEMBERS_LUA = """
local counts = {}
for i = 1, #KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, ARGV[1])
    counts[i] = redis.call('ZCARD', KEYS[i])
end
return counts
"""
_MEMBERS_SHA = hashlib.sha1(_MEMBERS_LUA.encode(), usedforsecurity=False).hexdigest()


class RedisGroupMembers:
    """Which groups of a channels_redis ``RedisChannelLayer`` have a member, asked of its Redis
    hosts synchronously: one script call per host that holds any of the groups (a group's key
    is on the host its name hashes to, as ``group_send`` finds it). The drain thread's own
    clients, with the layer's host settings and a timeout of ``SEND_TIMEOUT_SECONDS``: a
    blocking call from a thread costs a fraction of the asynchronous client's round trip."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self._clients: dict[int, Any] = {}

    def listened(self, groups: set[str]) -> set[str]:
        from redis.exceptions import NoScriptError

        by_host: dict[int, list[str]] = {}
        for group in groups:
            by_host.setdefault(self.layer.consistent_hash(group), []).append(group)
        cutoff = int(time.time()) - int(self.layer.group_expiry)
        listened: set[str] = set()
        for index, names in by_host.items():
            client = self._client(index)
            keys = [self.layer._group_key(name) for name in names]
            try:
                counts = client.evalsha(_MEMBERS_SHA, len(keys), *keys, cutoff)
            except NoScriptError:  # a new or flushed Redis: EVAL loads the script
                counts = client.eval(_MEMBERS_LUA, len(keys), *keys, cutoff)
            listened.update(name for name, n in zip(names, counts, strict=True) if int(n))
        return listened

    def _client(self, index: int) -> Any:
        client = self._clients.get(index)
        if client is None:
            import redis

            client = self._clients[index] = redis.Redis(
                connection_pool=_sync_pool(self.layer.hosts[index])
            )
        return client


def _sync_pool(host: dict[str, Any]) -> Any:
    """A blocking connection pool for one of the layer's hosts: the hosts' forms
    channels_redis accepts (an ``address``, a Sentinel master, or connection keywords)."""
    import redis
    import redis.sentinel

    options = dict(host)
    timeout = min(
        float(options.get("socket_timeout") or SEND_TIMEOUT_SECONDS), SEND_TIMEOUT_SECONDS
    )
    options["socket_timeout"] = timeout
    options.setdefault("socket_connect_timeout", timeout)
    if "address" in options:
        return redis.ConnectionPool.from_url(options.pop("address"), **options)
    master_name = options.pop("master_name", None)
    if master_name is not None:
        sentinels = options.pop("sentinels")
        sentinel_kwargs = options.pop("sentinel_kwargs", None)
        return redis.sentinel.SentinelConnectionPool(
            master_name,
            redis.sentinel.Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs),
            **options,
        )
    return redis.ConnectionPool(**options)


@dataclass
class Hint:
    group: str
    message: dict[str, Any]
    #: How many hook events this hint stands for (coalescing merges several into one).
    weight: int = 1


def hint_for(event: str, payload: dict[str, Any]) -> Hint | None:
    """The group message for a streaming hook event (``None`` for events it does not carry)."""
    if event == "chunks":
        return Hint(
            session_group(payload["session"]),
            {"type": "stream.chunks", "first": int(payload["first"]), "last": int(payload["last"])},
        )
    if event == "delta":
        return Hint(
            session_group(payload["session"]),
            {
                "type": "stream.delta",
                "agent": str(payload["agent"]),
                "turn": str(payload["turn"]),
                "delta": str(payload["delta"]),
            },
        )
    if event == "run_event":
        return Hint(run_group(payload["run"]), {"type": "stream.event", "seq": int(payload["seq"])})
    return None


def coalesce(hints: list[Hint]) -> list[Hint]:
    """Merge consecutive position hints of one group ("committed up to N" subsumes "up to M"
    for M <= N). Deltas are never merged or reordered."""
    out: list[Hint] = []
    for hint in hints:
        previous = out[-1] if out else None
        kind = hint.message["type"]
        if previous is not None and previous.group == hint.group:
            if kind == "stream.chunks" and previous.message["type"] == kind:
                previous.message["first"] = min(previous.message["first"], hint.message["first"])
                previous.message["last"] = max(previous.message["last"], hint.message["last"])
                previous.weight += hint.weight
                continue
            if kind == "stream.event" and previous.message["type"] == kind:
                previous.message["seq"] = max(previous.message["seq"], hint.message["seq"])
                previous.weight += hint.weight
                continue
        out.append(Hint(hint.group, dict(hint.message), hint.weight))
    return out


@dataclass
class PublisherStats:
    enqueued: int = 0
    sent: int = 0
    #: Hints dropped because the queue was full (the writer never waits).
    dropped_full: int = 0
    #: Hints dropped because the layer failed, timed out or had no consumer loop to reach.
    dropped_error: int = 0
    #: Hints not sent because their group had no member when the batch was sent (Redis layer).
    unheard: int = 0


class HintPublisher:
    """A ``streaming.subscribe`` listener with a bounded queue and one daemon drain thread.

    Fork-safe: a forked child (Celery prefork) starts its own queue and thread on first use.
    ``consumer_loop`` says where the in-memory layer's consumers run (``None``: nowhere yet).
    """

    def __init__(
        self,
        *,
        maxsize: int | None = None,
        layer_alias: str = "default",
        consumer_loop: Callable[[], asyncio.AbstractEventLoop | None] = lambda: None,
    ) -> None:
        configured: int = getattr(settings, "OPENRATH_WS_HINT_QUEUE", 10_000)
        self.maxsize = int(maxsize or configured)
        self.layer_alias = layer_alias
        self.stats = PublisherStats()
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: queue.Queue[Hint] = queue.Queue(maxsize=self.maxsize)
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._in_flight = 0
        self._consumer_loop = consumer_loop
        self._last_error_log = 0.0
        self._members: RedisGroupMembers | None = None  # the drain thread's

    # --- the writer's side: never blocks, never raises -------------------------------------

    def __call__(self, event: str, payload: dict[str, Any]) -> None:
        hint = hint_for(event, payload)
        if hint is None:
            return
        self._ensure_thread()
        try:
            self._queue.put_nowait(hint)
        except queue.Full:
            self.stats.dropped_full += 1
            return
        self.stats.enqueued += 1

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: start afresh
                self._queue = queue.Queue(maxsize=self.maxsize)
                self._in_flight = 0
                self._members = None  # the parent's Redis clients are not this process's
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._drain_forever, name="openrath-hint-publisher", daemon=True
                )
                self._thread.start()

    # --- the drain thread ---------------------------------------------------------------------

    def _drain_forever(self) -> None:
        loop = asyncio.new_event_loop()
        while True:
            first = self._queue.get()
            batch = [first]
            while len(batch) < DRAIN_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            with self._idle:
                self._in_flight += len(batch)
            try:
                self._send_batch(loop, batch)
            except Exception:  # the drain thread must survive anything
                logger.exception("hint publisher: batch failed")
            finally:
                for _ in batch:
                    self._queue.task_done()
                with self._idle:
                    self._in_flight -= len(batch)
                    self._idle.notify_all()

    def _send_batch(self, loop: asyncio.AbstractEventLoop, batch: list[Hint]) -> None:
        layer = get_channel_layer(self.layer_alias)
        if layer is None:
            self.stats.dropped_error += len(batch)
            return
        merged = coalesce(batch)
        if isinstance(layer, InMemoryChannelLayer):
            self._send_in_consumer_loop(layer, merged)
        elif RedisChannelLayer is not None and isinstance(layer, RedisChannelLayer):
            heard = self._listened(layer, merged)
            if heard:
                loop.run_until_complete(self._send_all(layer, heard))
        else:
            loop.run_until_complete(self._send_all(layer, merged))

    async def _send_all(self, layer: BaseChannelLayer, hints: list[Hint]) -> None:
        for hint in hints:
            try:
                await asyncio.wait_for(
                    layer.group_send(hint.group, hint.message), SEND_TIMEOUT_SECONDS
                )
            except Exception as exc:
                self.stats.dropped_error += hint.weight
                self._log_send_error(exc)
            else:
                self.stats.sent += hint.weight

    def _listened(self, layer: Any, hints: list[Hint]) -> list[Hint]:
        """The hints whose group has a member; the others are counted as unheard (all of them
        as dropped when Redis cannot say)."""
        if self._members is None or self._members.layer is not layer:
            self._members = RedisGroupMembers(layer)
        try:
            listened = self._members.listened({hint.group for hint in hints})
        except Exception as exc:
            self.stats.dropped_error += sum(hint.weight for hint in hints)
            self._log_send_error(exc)
            return []
        heard = [hint for hint in hints if hint.group in listened]
        self.stats.unheard += sum(hint.weight for hint in hints) - sum(h.weight for h in heard)
        return heard

    def _send_in_consumer_loop(self, layer: InMemoryChannelLayer, hints: list[Hint]) -> None:
        loop = self._consumer_loop()
        if loop is None or loop.is_closed() or not loop.is_running():
            # No consumer of this process to reach (or its loop is gone).
            self.stats.dropped_error += sum(hint.weight for hint in hints)
            return
        future = asyncio.run_coroutine_threadsafe(self._send_all(layer, hints), loop)
        try:
            # Waiting keeps the queue's back-pressure honest; _send_all counts each hint.
            future.result(timeout=SEND_TIMEOUT_SECONDS * max(1, len(hints)))
        except Exception as exc:  # the loop is stuck or went away mid-batch
            self._log_send_error(exc)

    def _log_send_error(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_error_log > 30:  # a down layer must not flood the log
            self._last_error_log = now
            logger.warning("hint publisher: group_send failed (%s); hints are being dropped", exc)

    # --- tests and benchmarks -----------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued hint has been handed to the layer (or dropped)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._queue.unfinished_tasks or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.05))
        return True


_publisher: HintPublisher | None = None
_unsubscribe: Callable[[], None] | None = None
_install_lock = threading.Lock()


def install_publisher(*, shared_layer_only: bool = False) -> HintPublisher | None:
    """Subscribe the publisher to the streaming hooks, once per process.

    ``shared_layer_only``: do nothing when the layer is the in-memory one (a worker process
    has no WebSocket consumers of its own to reach). Returns the publisher, or ``None``.
    """
    global _publisher, _unsubscribe
    layer = get_channel_layer()
    if layer is None or (shared_layer_only and isinstance(layer, InMemoryChannelLayer)):
        return None
    with _install_lock:
        if _publisher is None:
            _publisher = HintPublisher(consumer_loop=consumer_loop)
            _unsubscribe = streaming.subscribe(_publisher)
        return _publisher


def installed_publisher() -> HintPublisher | None:
    return _publisher
