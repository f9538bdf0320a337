"""Memory fixtures: facts are stored through the services, the one write path."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from memory_app import services
from memory_app.models import MemoryEntry, MemoryStats, MemoryTerm
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session
from tests.memory_app.labelled import ENTRIES


def memory_state() -> tuple[int, int, list[tuple[str, int, int]]]:
    """Everything a memory write may change: entries, postings and the counters."""
    stats = sorted(MemoryStats.objects.values_list("place", "entries", "terms"))
    return MemoryEntry.objects.count(), MemoryTerm.objects.count(), stats


@pytest.fixture
def labelled(project) -> dict[str, uuid.UUID]:
    """The 30 labelled facts in acme/research (project scope): key -> entry id."""
    ids = {}
    for key, text in ENTRIES.items():
        entry, created = services.memory_remember(project=project, text=text, trust="trusted")
        assert created
        ids[key] = entry.id
    return ids


@pytest.fixture
def make_session(project) -> Callable[..., Session]:
    """``make_session([("user", "text"), ("assistant", "text")])`` through session_create."""

    def make(messages=(), *, project=project) -> Session:
        chunks = [
            make_draft(role=role, kind="message", content={"text": text}) for role, text in messages
        ]
        return session_services.session_create(project=project, title="t", chunks=chunks)

    return make
