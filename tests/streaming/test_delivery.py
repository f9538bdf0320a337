"""Every committed chunk exactly once, in order: backfill, live, reconnect, stale hints.

The writer commits on other threads through ``sessions_app.services.chunks_append``; the
publisher turns each commit into a hint on the (in-memory) channel layer.
"""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from sessions_app import services, streaming
from sessions_app.models import Session
from sessions_app.streaming import session_group
from tests.sessions_app.conftest import msg
from tests.streaming.conftest import (
    append_texts,
    bearer,
    chunk_seqs,
    chunk_texts,
    in_thread,
    open_stream,
    receive_n,
    receive_until_ready,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_backfill_live_disconnect_and_reconnect_without_gap_or_duplicate(session_with, make_token):
    session = session_with(5)
    raw = make_token(["sessions:read"])
    path = f"/ws/sessions/{session.id}/"

    async def scenario():
        first, accepted, _ = await open_stream(f"{path}?after=-1", headers=bearer(raw))
        assert accepted
        backfill = await receive_until_ready(first)
        assert chunk_seqs(backfill) == [0, 1, 2, 3, 4]
        assert chunk_texts(backfill) == ["c0", "c1", "c2", "c3", "c4"]
        assert backfill[-1] == {"type": "ready", "after": 4}
        assert all(m["chunk"]["session"] == str(session.id) for m in backfill[:-1])

        await in_thread(lambda: append_texts(session.id, [f"live{i}" for i in range(10)]))
        live = await receive_n(first, 10)
        assert chunk_seqs(live) == list(range(5, 15))
        assert chunk_texts(live) == [f"live{i}" for i in range(10)]
        assert await first.receive_nothing(timeout=0.3)

        # Mid-stream: the writer goes on while the client reads three and drops the socket.
        writer = asyncio.ensure_future(
            in_thread(lambda: append_texts(session.id, [f"more{i}" for i in range(8)]))
        )
        seen = await receive_n(first, 3)
        assert chunk_seqs(seen) == [15, 16, 17]
        await first.disconnect()
        await writer
        await in_thread(lambda: append_texts(session.id, ["after0", "after1"]))

        second, accepted, _ = await open_stream(f"{path}?after=17", headers=bearer(raw))
        assert accepted
        resumed = await receive_until_ready(second)
        assert chunk_seqs(resumed) == list(range(18, 25))
        assert chunk_texts(resumed) == [f"more{i}" for i in range(3, 8)] + ["after0", "after1"]
        assert resumed[-1] == {"type": "ready", "after": 24}
        assert await second.receive_nothing(timeout=0.3)
        await second.disconnect()

    async_to_sync(scenario)()


def test_a_batch_append_arrives_whole_and_in_order(session_with, make_token):
    session = session_with(0)
    raw = make_token(["sessions:read"])

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        assert await receive_until_ready(communicator) == [{"type": "ready", "after": -1}]

        def append_batch() -> None:
            row = Session.objects.get(id=session.id)
            services.chunks_append(session=row, drafts=[msg(f"b{i}") for i in range(250)])

        await in_thread(append_batch)  # more than one database page
        got = await receive_n(communicator, 250)
        assert chunk_seqs(got) == list(range(250))
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_stale_repeated_and_early_hints_cause_no_duplicate(session_with, make_token, hints):
    session = session_with(5)
    raw = make_token(["sessions:read"])
    group = session_group(session.id)

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        await receive_until_ready(communicator)

        # Through the publisher: hints for what was already sent, twice, out of order.
        for first, last in ((0, 4), (3, 4), (0, 2), (0, 4)):
            hints("chunks", {"session": str(session.id), "first": first, "last": last})
        assert await asyncio.to_thread(hints.flush)
        assert await communicator.receive_nothing(timeout=0.3)

        # Straight onto the group: a hint from the future (nothing committed yet) sends nothing.
        layer = get_channel_layer()
        await layer.group_send(group, {"type": "stream.chunks", "first": 5, "last": 9})
        assert await communicator.receive_nothing(timeout=0.3)

        # A commit whose hint is lost (no publisher) is delivered on the next hint, once.
        streaming._listeners.remove(hints)
        try:
            await in_thread(lambda: append_texts(session.id, ["quiet"]))
        finally:
            streaming.subscribe(hints)
        assert await communicator.receive_nothing(timeout=0.3)
        await in_thread(lambda: append_texts(session.id, ["loud"]))
        got = await receive_n(communicator, 2)
        assert chunk_texts(got) == ["quiet", "loud"]
        assert chunk_seqs(got) == [5, 6]

        # The late, duplicate hints of those two commits change nothing.
        for _ in range(2):
            await layer.group_send(group, {"type": "stream.chunks", "first": 5, "last": 6})
            hints("chunks", {"session": str(session.id), "first": 6, "last": 6})
        assert await asyncio.to_thread(hints.flush)
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_after_in_the_middle_and_beyond_the_end(session_with, make_token):
    session = session_with(6)
    raw = make_token(["sessions:read"])

    async def scenario():
        middle, _, _ = await open_stream(f"/ws/sessions/{session.id}/?after=3", headers=bearer(raw))
        got = await receive_until_ready(middle)
        await middle.disconnect()
        beyond, _, _ = await open_stream(
            f"/ws/sessions/{session.id}/?after=40", headers=bearer(raw)
        )
        nothing = await receive_until_ready(beyond)
        await beyond.disconnect()
        return got, nothing

    got, nothing = async_to_sync(scenario)()
    assert chunk_seqs(got) == [4, 5]
    assert got[-1] == {"type": "ready", "after": 5}
    assert nothing == [{"type": "ready", "after": 40}]


def test_a_fork_streams_its_logical_list_not_the_bases_later_chunks(session_with, make_token):
    base = session_with(3, prefix="base")
    fork = services.session_fork(session=base, at=2)
    raw = make_token(["sessions:read"])

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/sessions/{fork.id}/", headers=bearer(raw))
        backfill = await receive_until_ready(communicator)
        assert chunk_texts(backfill) == ["base0", "base1"]
        # Chunks of the base session are stored there: "session" names the holder.
        assert {m["chunk"]["session"] for m in backfill[:-1]} == {str(base.id)}
        await in_thread(lambda: append_texts(base.id, ["base-later"]))
        assert await communicator.receive_nothing(timeout=0.3)
        await in_thread(lambda: append_texts(fork.id, ["fork-own"]))
        got = await receive_n(communicator, 1)
        assert chunk_texts(got) == ["fork-own"]
        assert chunk_seqs(got) == [2]
        assert got[0]["chunk"]["session"] == str(fork.id)
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_token_deltas_are_forwarded_as_they_come(session_with, make_token):
    session = session_with(1)
    raw = make_token(["sessions:read"])

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        await receive_until_ready(communicator)

        def generate() -> None:
            for piece in ("Hel", "lo", "!"):
                streaming.token_delta(session.id, agent="writer", delta=piece, turn="t1")

        await asyncio.to_thread(generate)
        got = await receive_n(communicator, 3)
        assert got == [
            {"type": "delta", "agent": "writer", "turn": "t1", "delta": "Hel"},
            {"type": "delta", "agent": "writer", "turn": "t1", "delta": "lo"},
            {"type": "delta", "agent": "writer", "turn": "t1", "delta": "!"},
        ]
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_a_commit_racing_the_backfill_is_delivered_once(
    session_with, make_token, monkeypatch, hints
):
    """The group is joined before the backfill reads: a chunk committed right after the
    backfill's read is announced to this consumer, so it is neither lost nor sent twice."""
    from sessions_app.consumers import SessionStreamConsumer

    session = session_with(3)
    raw = make_token(["sessions:read"])
    real_read_after = SessionStreamConsumer.read_after
    raced: list[int] = []

    def read_then_commit(self, after: int):
        batch = real_read_after(self, after)
        if not raced:
            raced.append(after)
            append_texts(session.id, ["raced"])  # committed after the read, before "ready"
            assert hints.flush()  # its hint has reached the group before the backfill ends
        return batch

    monkeypatch.setattr(SessionStreamConsumer, "read_after", read_then_commit)

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        backfill = await receive_until_ready(communicator)
        late = await receive_n(communicator, 1)
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return backfill, late

    backfill, late = async_to_sync(scenario)()
    assert raced == [-1]
    assert chunk_seqs(backfill) == [0, 1, 2]
    assert chunk_texts(late) == ["raced"]
    assert chunk_seqs(late) == [3]
