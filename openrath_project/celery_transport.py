"""kombu's Redis transport with acks that free the prefetch slot even when Redis fails.

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

``celery.py`` selects this transport for ``redis://`` and ``rediss://`` broker URLs.
:func:`check_kombu_internals` fails the worker's start if the kombu internals relied on moved.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import kombu
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis import exceptions as redis_exceptions

TRANSPORT_PATH = "openrath_project.celery_transport:Transport"
REDIS_SCHEMES = frozenset({"redis", "rediss"})


def check_kombu_internals() -> None:
    """Raise RuntimeError unless kombu still has the shape this module overrides."""
    problems = []
    if kombu.VERSION[0] != 5:
        problems.append(f"kombu {kombu.__version__} (checked against 5.x)")
    for name in ("ack", "reject", "restore_by_tag", "_remove_from_indices"):
        if not callable(getattr(kombu_redis.QoS, name, None)):
            problems.append(f"kombu.transport.redis.QoS.{name} is gone")
    if not issubclass(kombu_redis.QoS, virtual.QoS):
        problems.append("kombu.transport.redis.QoS no longer extends virtual.QoS")
    if getattr(kombu_redis.Channel, "QoS", None) is not kombu_redis.QoS:
        problems.append("kombu.transport.redis.Channel.QoS is not kombu.transport.redis.QoS")
    if getattr(kombu_redis.Transport, "Channel", None) is not kombu_redis.Channel:
        problems.append("kombu.transport.redis.Transport.Channel is not its Channel")
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


logger = logging.getLogger(__name__)


class QoS(kombu_redis.QoS):
    """Redis ack emulation whose ack and reject free the prefetch slot in every case."""

    def ack(self, delivery_tag: Any) -> None:
        try:
            self._remove_from_indices(delivery_tag).execute()
        except (redis_exceptions.RedisError, OSError):
            raise  # Celery logs "Couldn't ack" once; the message is redelivered later
        except Exception as exc:  # noqa: BLE001
            # Not raised: the consumer's close acks its pending messages after the connection
            # is gone (kombu then fails on the missing connection info); raising would abort
            # the close and the worker would never reconnect (tests/drills/test_outage_drills).
            logger.warning("could not ack %s (%s): it will be redelivered", delivery_tag, exc)
        finally:
            virtual.QoS.ack(self, delivery_tag)  # frees the slot

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            if requeue:
                self.restore_by_tag(delivery_tag, leftmost=True)
            else:
                self._remove_from_indices(delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)  # as kombu's reject: the slot, not a requeue


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel
