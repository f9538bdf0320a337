"""The publisher: hook events become group hints off the writer's thread; a full queue or a
down layer drops hints (counted) and never slows or breaks the write."""

from __future__ import annotations

import threading

import pytest

from openrath_project.publisher import (
    Hint,
    HintPublisher,
    RedisGroupMembers,
    coalesce,
    hint_for,
    install_publisher,
    installed_publisher,
)
from sessions_app import streaming
from sessions_app.selectors import chunk_all
from tests.streaming.conftest import append_texts


def test_hook_events_map_to_group_messages():
    assert hint_for("chunks", {"session": "s1", "first": 3, "last": 5}) == Hint(
        "session.s1", {"type": "stream.chunks", "first": 3, "last": 5}
    )
    assert hint_for("delta", {"session": "s1", "agent": "a", "delta": "x", "turn": "t"}) == Hint(
        "session.s1", {"type": "stream.delta", "agent": "a", "turn": "t", "delta": "x"}
    )
    assert hint_for("run_event", {"run": "r1", "seq": 7}) == Hint(
        "run.r1", {"type": "stream.event", "seq": 7}
    )
    assert hint_for("something_else", {}) is None


def test_coalescing_merges_consecutive_positions_and_keeps_every_delta():
    def chunks(group: str, first: int, last: int) -> Hint:
        return Hint(group, {"type": "stream.chunks", "first": first, "last": last})

    def delta(text: str) -> Hint:
        return Hint("session.a", {"type": "stream.delta", "agent": "w", "turn": "t", "delta": text})

    merged = coalesce(
        [
            chunks("session.a", 0, 1),
            chunks("session.a", 2, 4),
            delta("x"),
            delta("y"),
            chunks("session.a", 5, 5),
            chunks("session.b", 0, 0),
            Hint("run.r", {"type": "stream.event", "seq": 3}),
            Hint("run.r", {"type": "stream.event", "seq": 2}),
        ]
    )
    assert [(h.group, h.message, h.weight) for h in merged] == [
        ("session.a", {"type": "stream.chunks", "first": 0, "last": 4}, 2),
        ("session.a", {"type": "stream.delta", "agent": "w", "turn": "t", "delta": "x"}, 1),
        ("session.a", {"type": "stream.delta", "agent": "w", "turn": "t", "delta": "y"}, 1),
        ("session.a", {"type": "stream.chunks", "first": 5, "last": 5}, 1),
        ("session.b", {"type": "stream.chunks", "first": 0, "last": 0}, 1),
        ("run.r", {"type": "stream.event", "seq": 3}, 2),
    ]


def test_a_full_queue_drops_and_counts_without_blocking(monkeypatch):
    publisher = HintPublisher(maxsize=2)
    monkeypatch.setattr(publisher, "_ensure_thread", lambda: None)  # nothing drains
    for seq in range(5):
        publisher("run_event", {"run": "r", "seq": seq})
    assert (publisher.stats.enqueued, publisher.stats.dropped_full) == (2, 3)


def test_without_a_consumer_loop_the_in_memory_layer_hints_are_dropped_and_counted():
    publisher = HintPublisher(maxsize=10)
    publisher("run_event", {"run": "r", "seq": 1})
    assert publisher.flush()
    assert (publisher.stats.sent, publisher.stats.dropped_error) == (0, 1)


def test_a_forked_child_starts_its_own_queue_and_thread():
    publisher = HintPublisher(maxsize=10)
    publisher("run_event", {"run": "r", "seq": 1})
    assert publisher.flush()
    parent_thread, parent_queue = publisher._thread, publisher._queue
    publisher._pid = -1  # as seen from a child: the pid differs
    publisher("run_event", {"run": "r", "seq": 2})
    assert publisher.flush()
    assert publisher._thread is not parent_thread
    assert publisher._queue is not parent_queue
    assert publisher.stats.dropped_error == 2


def test_install_is_once_per_process_and_skips_in_memory_for_workers():
    first = install_publisher()
    assert first is not None
    assert install_publisher() is first
    assert installed_publisher() is first
    assert streaming._listeners.count(first) == 1
    assert install_publisher(shared_layer_only=True) is None  # in-memory layer here


@pytest.mark.django_db(transaction=True)
def test_a_down_layer_never_breaks_the_writer(session_with, settings, monkeypatch):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # Nothing listens on port 1: every group_send fails.
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    session = session_with(1)
    # The process's own publisher handles the creation's hint first: it builds the layer (the
    # channel layer manager builds one per alias, not thread-safely), so wait for it.
    process_publisher = installed_publisher()
    assert process_publisher is not None
    assert process_publisher.flush(timeout=30)
    publisher = HintPublisher(maxsize=100)
    sending_threads: set[str] = set()
    real_listened = RedisGroupMembers.listened

    def recording_listened(self, groups):  # the layer's first call for a batch
        sending_threads.add(threading.current_thread().name)
        return real_listened(self, groups)

    monkeypatch.setattr(RedisGroupMembers, "listened", recording_listened)
    unsubscribe = streaming.subscribe(publisher)
    try:
        append_texts(session.id, ["a", "b", "c"])
        assert publisher.flush(timeout=30)
    finally:
        unsubscribe()
    assert [c.content["text"] for c in chunk_all(session.id)] == ["c0", "a", "b", "c"]
    assert publisher.stats.enqueued == 3
    assert publisher.stats.sent == 0
    assert publisher.stats.dropped_error == 3
    assert sending_threads == {"openrath-hint-publisher"}
