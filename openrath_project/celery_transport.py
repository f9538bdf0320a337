"""Acks on kombu's Redis transport that free the prefetch slot even when Redis fails.

kombu's Redis ``QoS.ack`` (and ``reject``) first removes the message from Redis's unacked index
and only then frees the consumer's prefetch slot. When that Redis call fails (a partition from
Redis, a socket timeout), the slot is never freed: with late acks and a prefetch of
concurrency × 1, each such failure costs the worker one slot for good, and a worker that lost
them all takes no task again while its queue grows (docs/drills.md, "Network faults").

Here the slot is freed whatever the Redis call did, and the error still propagates, so Celery
logs it as before (``Couldn't ack …``, once per failure). A message whose ack did not reach Redis
stays in the unacked index and is delivered again after the visibility timeout: harmless, a
task message is only a hint, the run's lease decides who executes a run (and the reconciler
re-sends hints anyway).

:func:`install` makes kombu's own Redis channel use this QoS; the Celery worker calls it on
``worker_init`` (``celery.py``), before its consumer opens a channel. The transport itself is
still the one kombu picks from the broker URL's scheme. Selecting a transport of ours by its
import path instead (``broker_transport``, as a first version did) loses the scheme: kombu no
longer turns TLS on for ``rediss://``, and the broker is logged as
``openrath_project.celery_transport:Transport://…``, which is what made the Redis outage drill
believe the worker never reconnected (docs/drills.md). :func:`check_kombu_internals` (run by
:func:`install`) fails the worker's start if the kombu internals relied on moved.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kombu
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual


class QoS(kombu_redis.QoS):
    """Redis ack emulation whose ack and reject free the prefetch slot in every case."""

    def ack(self, delivery_tag: Any) -> None:
        try:
            self._remove_from_indices(delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)  # frees the slot; the error (if any) goes on

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            if requeue:
                self.restore_by_tag(delivery_tag, leftmost=True)
            else:
                self._remove_from_indices(delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)  # as kombu's reject: the slot, not a requeue


def check_kombu_internals() -> None:
    """Raise RuntimeError unless kombu still has the shape this module relies on."""
    problems = []
    if kombu.VERSION[0] != 5:
        problems.append(f"kombu {kombu.__version__} (checked against 5.x)")
    for name in ("ack", "reject", "restore_by_tag", "_remove_from_indices"):
        if not callable(getattr(kombu_redis.QoS, name, None)):
            problems.append(f"kombu.transport.redis.QoS.{name} is gone")
    if not issubclass(kombu_redis.QoS, virtual.QoS):
        problems.append("kombu.transport.redis.QoS no longer extends virtual.QoS")
    if getattr(kombu_redis.Channel, "QoS", None) not in (kombu_redis.QoS, QoS):
        problems.append("kombu.transport.redis.Channel.QoS is not kombu.transport.redis.QoS")
    if getattr(kombu_redis.Transport, "Channel", None) is not kombu_redis.Channel:
        problems.append("kombu.transport.redis.Transport.Channel is not its Channel")
    # A channel makes its QoS from its class's ``QoS`` attribute (what install() replaces).
    if not isinstance(getattr(virtual.Channel, "qos", None), property):
        problems.append("virtual.Channel.qos is no longer a property built from Channel.QoS")
    # virtual.QoS.ack is what frees the slot: it marks the tag in ``_dirty``, and
    # can_consume() counts ``_delivered`` minus ``_dirty``.
    # The probe's "channel" only answers the shutdown hook's question (nothing to restore).
    probe = virtual.QoS(channel=SimpleNamespace(do_restore=False), prefetch_count=1)
    if not (hasattr(probe, "_delivered") and hasattr(probe, "_dirty")):
        problems.append("virtual.QoS no longer keeps _delivered/_dirty")
    else:
        probe.append(object(), "probe")
        virtual.QoS.ack(probe, "probe")
        if not probe.can_consume():
            problems.append("virtual.QoS.ack no longer frees the prefetch slot")
    if problems:
        raise RuntimeError(
            "openrath_project.celery_transport relies on kombu internals that changed: "
            + "; ".join(problems)
        )


def install() -> None:
    """Give kombu's Redis channels (and Sentinel's, a subclass) this module's QoS. Idempotent;
    raises RuntimeError (and changes nothing) if kombu's internals are not as expected.
    Channels opened before the call keep the QoS they have."""
    check_kombu_internals()
    kombu_redis.Channel.QoS = QoS


def installed() -> bool:
    return kombu_redis.Channel.QoS is QoS
