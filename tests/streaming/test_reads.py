"""Shared reads: the consumers of one object in a process read each batch once, and a read is
only reused when it is known to show what the consumer needs."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync

from openrath_project.ws.reads import SharedReads
from sessions_app.consumers import SessionStreamConsumer
from tests.streaming.conftest import (
    append_texts,
    bearer,
    chunk_texts,
    in_thread,
    open_stream,
    receive_n,
    receive_until_ready,
)


class Fetcher:
    """Each call takes the next result; with a ``gate`` it answers only once the gate opens."""

    def __init__(self, *results, delay: float = 0.05, gate: asyncio.Event | None = None) -> None:
        self.results = list(results)
        self.calls = 0
        self.delay = delay
        self.gate = gate

    async def __call__(self):
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        else:
            await asyncio.sleep(self.delay)
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def test_concurrent_readers_that_asked_before_the_read_started_share_it():
    async def scenario():
        reads = SharedReads()
        fetch = Fetcher("page")
        asked = time.monotonic()
        results = await asyncio.gather(
            *(reads.read(("g", 1), fetch, not_before=asked) for _ in range(5))
        )
        return results, fetch.calls, reads.started, reads.joined

    assert async_to_sync(scenario)() == (["page"] * 5, 1, 1, 4)


def test_an_older_read_is_reused_only_when_its_result_is_good_enough():
    async def scenario():
        reads = SharedReads()
        fetch = Fetcher({"last": 3}, {"last": 5}, delay=0)
        first = await reads.read(("g", 1), fetch, not_before=time.monotonic())
        later = time.monotonic() + 1  # asked after the first read started
        reused = await reads.read(
            ("g", 1), fetch, not_before=later, good_enough=lambda r: r["last"] >= 3
        )
        fresh = await reads.read(
            ("g", 1), fetch, not_before=later, good_enough=lambda r: r["last"] >= 4
        )
        return first, reused, fresh, fetch.calls

    assert async_to_sync(scenario)() == ({"last": 3}, {"last": 3}, {"last": 5}, 2)


def test_a_failed_read_is_not_reused_and_a_departed_reader_does_not_cancel_it():
    async def scenario():
        reads = SharedReads()
        failing = Fetcher(RuntimeError("db away"), "after the failure")
        with pytest.raises(RuntimeError):
            await reads.read(("g", 1), failing, not_before=time.monotonic())
        retried = await reads.read(
            ("g", 1), failing, not_before=time.monotonic() + 1, good_enough=lambda r: True
        )

        # The read answers only when the gate opens, after the leader left: on any machine
        # speed the follower joins a read in flight and the leader departs before it ends.
        gate = asyncio.Event()
        slow = Fetcher("survives", gate=gate)
        asked = time.monotonic()
        leader = asyncio.ensure_future(reads.read(("g", 2), slow, not_before=asked))
        await asyncio.sleep(0.01)
        follower = asyncio.ensure_future(reads.read(("g", 2), slow, not_before=asked))
        await asyncio.sleep(0.01)
        leader.cancel()
        await asyncio.sleep(0.01)
        in_flight = (leader.cancelled(), follower.done(), reads.joined)
        gate.set()
        return retried, failing.calls, in_flight, await follower, slow.calls

    assert async_to_sync(scenario)() == (
        "after the failure",
        2,
        (True, False, 1),
        "survives",
        1,
    )


@pytest.mark.django_db(transaction=True)
def test_five_streams_of_one_session_read_each_commit_once(session_with, make_token, monkeypatch):
    session = session_with(1)
    raw = make_token(["sessions:read"])
    reads: list[int] = []
    real_read_after = SessionStreamConsumer.read_after

    def counting_read_after(self, after: int):
        reads.append(after)
        return real_read_after(self, after)

    monkeypatch.setattr(SessionStreamConsumer, "read_after", counting_read_after)

    async def scenario():
        streams = []
        for _ in range(5):
            communicator, _, _ = await open_stream(
                f"/ws/sessions/{session.id}/", headers=bearer(raw)
            )
            await receive_until_ready(communicator)
            streams.append(communicator)
        reads.clear()
        received = []
        for text in ("one", "two", "three"):
            await in_thread(lambda text=text: append_texts(session.id, [text]))
            received.append([chunk_texts(await receive_n(s, 1))[0] for s in streams])
        for communicator in streams:
            assert await communicator.receive_nothing(timeout=0.2)
            await communicator.disconnect()
        return received

    received = async_to_sync(scenario)()
    assert received == [["one"] * 5, ["two"] * 5, ["three"] * 5]
    assert reads == [0, 1, 2]
