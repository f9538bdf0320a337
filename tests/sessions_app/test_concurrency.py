"""Concurrent appends on a real PostgreSQL: one total order, no loss, no duplicate, no gap."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from sessions_app import services
from sessions_app.models import Chunk, Session
from sessions_app.selectors import chunk_all
from tests.sessions_app.conftest import msg
from tests.support import require_postgres

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WRITERS = 6
APPENDS = 40


def test_concurrent_appends_keep_one_total_order(project):
    require_postgres()
    session = services.session_create(project=project, title="race", chunks=[msg("start")])
    errors: list[BaseException] = []
    barrier = threading.Barrier(WRITERS)

    def writer(index: int) -> None:
        try:
            row = Session.objects.get(id=session.id)
            barrier.wait()
            for i in range(APPENDS):
                batch = 1 + (i % 3)  # batches of 1..3 chunks
                services.chunks_append(
                    session=row,
                    drafts=[msg(f"w{index}-{i}-{j}") for j in range(batch)],
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    per_writer = sum(1 + (i % 3) for i in range(APPENDS))
    expected = 1 + WRITERS * per_writer
    chunks = chunk_all(session.id)
    assert [c.seq for c in chunks] == list(range(expected))
    written = [c.content["text"] for c in chunks[1:]]
    assert len(written) == len(set(written)) == WRITERS * per_writer
    # each writer's batches appear whole and in the writer's own order
    for index in range(WRITERS):
        mine = [t for t in written if t.startswith(f"w{index}-")]
        assert mine == [f"w{index}-{i}-{j}" for i in range(APPENDS) for j in range(1 + i % 3)]
    session.refresh_from_db()
    assert session.own_len == expected
    assert Chunk.objects.filter(session=session).count() == expected
