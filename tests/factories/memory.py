"""Memory factories: facts stored by ``memory_remember``, so their postings and the place's
counters exist as they would in production."""

from __future__ import annotations

from typing import Any

import factory

from memory_app import services
from memory_app.models import MemoryEntry
from tests.factories.base import ServiceFactory
from tests.factories.tenancy import ProjectFactory


class MemoryEntryFactory(ServiceFactory):
    """A fact in ``project`` (project scope unless told); a duplicate text in the same place
    returns the stored entry, as the service does."""

    class Meta:
        model = MemoryEntry

    project = factory.SubFactory(ProjectFactory)
    text = factory.Sequence(lambda n: f"Fact number {n} is worth keeping.")
    scope = "project"
    agent = ""
    trust = "untrusted"

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> MemoryEntry:
        entry, _ = services.memory_remember(**kwargs)
        return entry
