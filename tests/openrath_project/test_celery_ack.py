"""A failed ack frees the prefetch slot (openrath_project/celery_transport.py).

Against the real Redis at OPENRATH_TEST_REDIS_URL, reached by the consumer through a TCP relay
(tests/drills/netbed.py's FaultProxy) that is switched to a black hole while the message is
acked: the ack's Redis call times out for real. Found by the network drill: with kombu's own
Redis transport a Celery worker that had lost its prefetch slots that way never consumed again.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.message import Message

from openrath_project.celery_transport import TRANSPORT_PATH, check_kombu_internals
from tests.drills.netbed import FaultProxy
from tests.support import require_redis

# Generous bounds: the ack gives up after socket_timeout (plus redis-py's retries).
OPTIONS = {"socket_timeout": 1, "socket_connect_timeout": 1, "visibility_timeout": 3600}
DRAIN_SECONDS = 20


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def relayed_redis() -> Iterator[tuple[FaultProxy, str, str]]:
    """(proxy, the relayed URL, the direct URL); the relay is named ``redis``."""
    direct = require_redis()
    parts = urlsplit(direct)
    port = _free_port()
    proxy = FaultProxy()
    proxy.add("redis", ("127.0.0.1", port), (parts.hostname or "127.0.0.1", parts.port or 6379))
    try:
        yield proxy, f"redis://127.0.0.1:{port}{parts.path or '/0'}", direct
    finally:
        proxy.close()


@contextmanager
def _consumer(url: str, transport: str | None, queue: Queue) -> Iterator[tuple[Any, list[Any]]]:
    received: list[Message] = []
    with Connection(url, transport=transport, transport_options=OPTIONS) as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1)
        with Consumer(channel, [queue], callbacks=[lambda body, msg: received.append(msg)]):
            yield conn, received


def _drain_until(conn: Any, received: list[Message], count: int) -> None:
    # drain_events returns after each delivery; the socket timeout ends a silent wait.
    for _ in range(DRAIN_SECONDS):
        if len(received) >= count:
            return
        with suppress(TimeoutError):
            conn.drain_events(timeout=1)
    assert len(received) >= count, f"received {len(received)} of {count} messages"


def _publish(direct: str, queue: Queue, body: str) -> None:
    with Connection(direct) as conn:
        Producer(conn.channel()).publish(body, exchange=queue.exchange, routing_key=queue.name,
                                         declare=[queue], serializer="json")  # fmt: skip


def _queue() -> Queue:
    name = f"test-ack-{uuid.uuid4().hex[:10]}"
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def _ack_while_partitioned(proxy: FaultProxy, conn: Any, message: Message) -> list[str]:
    """Ack as Celery's worker does (``ack_log_error``) with Redis black-holed; the log lines."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("test_celery_ack")
    logger.addHandler(handler)
    proxy.set("redis", mode="blackhole")
    try:
        message.ack_log_error(logger, conn.connection_errors + conn.channel_errors)
    finally:
        proxy.set("redis")
        logger.removeHandler(handler)
    return records


def test_kombu_internals_are_as_expected() -> None:
    check_kombu_internals()  # the worker refuses to start otherwise (celery.py)


def test_a_failed_ack_frees_the_slot_and_the_next_message_is_consumed(
    relayed_redis: tuple[FaultProxy, str, str],
) -> None:
    proxy, relayed, direct = relayed_redis
    queue = _queue()
    _publish(direct, queue, "first")
    with _consumer(relayed, TRANSPORT_PATH, queue) as (conn, received):
        _drain_until(conn, received, 1)
        qos = received[0].channel.qos
        assert not qos.can_consume()  # prefetch 1, one message held

        records = _ack_while_partitioned(proxy, conn, received[0])

        assert len(records) == 1, records  # Celery's "Couldn't ack", once
        assert records[0].startswith("Couldn't ack")
        assert qos.can_consume()  # the slot is free although the ack's Redis call failed
        _publish(direct, queue, "second")
        _drain_until(conn, received, 2)
        assert received[1].payload == "second"
        received[1].ack()
        assert qos.can_consume()


def test_a_failed_reject_frees_the_slot(relayed_redis: tuple[FaultProxy, str, str]) -> None:
    proxy, relayed, direct = relayed_redis
    queue = _queue()
    _publish(direct, queue, "first")
    with _consumer(relayed, TRANSPORT_PATH, queue) as (conn, received):
        _drain_until(conn, received, 1)
        qos = received[0].channel.qos
        proxy.set("redis", mode="blackhole")
        try:
            with pytest.raises(conn.connection_errors):
                received[0].reject(requeue=True)
        finally:
            proxy.set("redis")
        assert qos.can_consume()
        _publish(direct, queue, "second")
        _drain_until(conn, received, 2)
        assert "second" in [m.payload for m in received[1:]]


def test_kombus_own_transport_keeps_the_slot(relayed_redis: tuple[FaultProxy, str, str]) -> None:
    """Why the module exists: with kombu's transport the consumer is stuck after the failure
    (if this starts failing, kombu fixed it and celery_transport.py can go)."""
    proxy, relayed, direct = relayed_redis
    queue = _queue()
    _publish(direct, queue, "first")
    with _consumer(relayed, None, queue) as (conn, received):
        _drain_until(conn, received, 1)
        qos = received[0].channel.qos
        records = _ack_while_partitioned(proxy, conn, received[0])
        assert records
        assert records[0].startswith("Couldn't ack")
        assert not qos.can_consume()


@pytest.mark.parametrize(
    ("url", "selected"),
    [("redis://h:6379/0", True), ("rediss://h:6380/0", True), ("memory://", False)],
)
def test_the_celery_app_selects_the_transport_for_redis_brokers(url: str, selected: bool) -> None:
    from celery import Celery

    from openrath_project.celery import _select_redis_transport

    source: dict[str, Any] = {"broker_url": url, "broker_transport": None}
    _select_redis_transport(sender=Celery("t"), source=source)
    assert (source["broker_transport"] == TRANSPORT_PATH) is selected
    if selected:
        with Connection(url, transport=source["broker_transport"]) as conn:
            assert type(conn.transport).__module__ == "openrath_project.celery_transport"


def test_a_celery_worker_keeps_consuming_after_a_failed_late_ack(
    relayed_redis: tuple[FaultProxy, str, str],
) -> None:
    """The drill's finding end to end: a Celery worker (late acks, prefetch 1) whose ack fails
    because Redis is black-holed takes the next task once Redis is back."""
    from celery import Celery
    from celery.contrib.testing.worker import start_worker

    proxy, relayed, direct = relayed_redis
    queue_name = f"test-ack-{uuid.uuid4().hex[:10]}"
    app = Celery("test-ack", set_as_current=False)
    app.conf.update(
        broker_url=relayed,
        broker_transport=TRANSPORT_PATH,
        broker_transport_options=OPTIONS,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue_name,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
    )
    started, release, done = threading.Event(), threading.Event(), []

    @app.task(name="test_ack.step")
    def step(n: int) -> None:
        if n == 1:
            started.set()
            release.wait(DRAIN_SECONDS)  # Redis is black-holed meanwhile; then the ack fails
        done.append(n)

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    sender = Celery("test-ack-sender", set_as_current=False)
    sender.conf.update(broker_url=direct, task_default_queue=queue_name)
    try:
        with start_worker(app, pool="solo", concurrency=1, perform_ping_check=False):
            # after the worker set its logging up; Celery logs "Couldn't ack" here
            logging.getLogger("celery.worker.request").addHandler(handler)
            sender.send_task("test_ack.step", args=(1,))
            assert started.wait(DRAIN_SECONDS)
            proxy.set("redis", mode="blackhole")
            release.set()
            assert _wait_for(lambda: any(r.startswith("Couldn't ack") for r in records))
            proxy.set("redis")
            sender.send_task("test_ack.step", args=(2,))
            assert _wait_for(lambda: 2 in done, seconds=60), (done, records)
    finally:
        proxy.set("redis")
        logging.getLogger("celery.worker.request").removeHandler(handler)
        sender.close()
        app.close()
    assert done == [1, 2]
    assert sum(r.startswith("Couldn't ack") for r in records) == 1


def _wait_for(condition: Any, seconds: float = DRAIN_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())
