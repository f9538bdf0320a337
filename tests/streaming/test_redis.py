"""Streams over the Redis channel layer (channels_redis against the real Redis), and the
cross-process connection counter kept in Redis."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from openrath_project.publisher import HintPublisher, RedisGroupMembers
from openrath_project.ws.limits import RedisLimiter
from tests.streaming.conftest import (
    append_texts,
    bearer,
    chunk_seqs,
    chunk_texts,
    in_thread,
    open_stream,
    receive_n,
    receive_until_ready,
    refused_with,
)
from tests.support import require_redis

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis_layer(settings):
    """The channels_redis layer on the test Redis, under a prefix of its own; ``REDIS_URL`` is
    set too, so the connection limit is counted in Redis."""
    url = require_redis()
    prefix = f"openrath-test-{uuid.uuid4().hex[:12]}"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": prefix, "capacity": 1500, "expiry": 30},
        }
    }
    settings.REDIS_URL = url
    return url


def test_chunks_committed_on_another_thread_arrive_through_redis(
    redis_layer, session_with, make_token, hints
):
    session = session_with(2)
    raw = make_token(["sessions:read"])
    assert hints.flush()  # the creation's own hint
    sent_before = hints.stats.sent

    async def scenario():
        layer = get_channel_layer()
        assert type(layer).__module__ == "channels_redis.core"
        communicator, accepted, _ = await open_stream(
            f"/ws/sessions/{session.id}/", headers=bearer(raw)
        )
        assert accepted
        assert chunk_seqs(await receive_until_ready(communicator)) == [0, 1]
        await in_thread(lambda: append_texts(session.id, [f"r{i}" for i in range(20)]))
        got = await receive_n(communicator, 20)
        assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert chunk_seqs(got) == list(range(2, 22))
    assert chunk_texts(got) == [f"r{i}" for i in range(20)]
    assert hints.flush()
    # The 20 hints went through Redis (some may have been coalesced into one send).
    assert hints.stats.sent - sent_before == 20


def test_the_connection_limit_is_counted_in_redis(redis_layer, session_with, make_token, settings):
    settings.OPENRATH_MAX_WS_PER_PRINCIPAL = 1
    session = session_with(1)
    raw = make_token(["sessions:read"])

    async def scenario():
        first, accepted, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        assert accepted
        await receive_until_ready(first)
        second = await refused_with(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        await first.disconnect()
        third, accepted_third, _ = await open_stream(
            f"/ws/sessions/{session.id}/", headers=bearer(raw)
        )
        await third.disconnect()
        return second, accepted_third

    assert async_to_sync(scenario)() == (4429, True)


def test_redis_limiter_counts_across_instances_and_forgets_dead_processes():
    url = require_redis()
    prefix = f"openrath-test-{uuid.uuid4().hex[:12]}:"
    key = "tenant:token:abc"

    async def scenario():
        web_1, web_2 = RedisLimiter(url, prefix=prefix), RedisLimiter(url, prefix=prefix)
        results = [
            await web_1.acquire(key, "a", 2),
            await web_2.acquire(key, "b", 2),
            await web_2.acquire(key, "c", 2),
            await web_1.acquire(key, "a", 2),  # the same connection again: still one slot
        ]
        await web_1.release(key, "a")
        results.append(await web_2.acquire(key, "c", 2))
        counted = await web_1.count(key)
        # A process that died without releasing: its entry expired a minute ago.
        client = web_1._client()
        await client.zadd(prefix + key, {"b": 1})
        results.append(await web_1.acquire(key, "d", 2))
        members = sorted(m.decode() for m in await client.zrange(prefix + key, 0, -1))
        await client.delete(prefix + key)
        return results, counted, members

    results, counted, members = async_to_sync(scenario)()
    assert results == [True, True, False, True, True, True]
    assert counted == 2
    assert members == ["c", "d"]


def test_hints_reach_only_the_groups_that_have_a_member(redis_layer):
    """The publisher asks Redis which groups have a member and sends only to those: a hint for
    a group nobody joined costs the one membership check, not a ``group_send``."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("run.heard", channel)
    publisher = HintPublisher(maxsize=100)
    sent_to: list[str] = []
    real_group_send = layer.group_send

    async def recording_group_send(group, message):
        sent_to.append(group)
        return await real_group_send(group, message)

    layer.group_send = recording_group_send
    publisher("run_event", {"run": "unheard", "seq": 1})
    publisher("run_event", {"run": "heard", "seq": 4})
    publisher("chunks", {"session": "nobody", "first": 0, "last": 2})
    assert publisher.flush(timeout=30)
    assert sent_to == ["run.heard"]
    assert (publisher.stats.sent, publisher.stats.unheard, publisher.stats.dropped_error) == (
        1,
        2,
        0,
    )
    assert async_to_sync(layer.receive)(channel) == {"type": "stream.event", "seq": 4}


def test_a_member_past_the_group_expiry_does_not_count_and_a_flushed_script_is_reloaded(
    redis_layer,
):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("run.stale", channel)
    members = RedisGroupMembers(layer)
    assert members.listened({"run.stale", "run.empty"}) == {"run.stale"}
    client = members._client(0)
    client.script_flush()  # as a restarted Redis would have it: EVALSHA finds no script
    assert members.listened({"run.stale"}) == {"run.stale"}
    # Joined longer ago than the group expiry: group_send would drop the member first; so does
    # the check.
    key = layer._group_key("run.stale")
    client.zadd(key, {channel: 1})
    assert members.listened({"run.stale"}) == set()
    assert client.zcard(key) == 0
