"""Session factories: sessions and chunks made by the session services (the one write path),
so lengths, usage totals and the write context's stamps are what production writes."""

from __future__ import annotations

from typing import Any

import factory

from sessions_app import services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Chunk, Session
from tests.factories.base import ServiceFactory
from tests.factories.tenancy import ProjectFactory


def message(text: str, role: str = "user", **extra: Any) -> Any:
    """A validated message draft (``extra``: agent, usage, trust, ...)."""
    return make_draft(role=role, kind="message", content={"text": text}, **extra)


class SessionFactory(ServiceFactory):
    """``SessionFactory(messages=["hi", "there"])``: a root session through ``session_create``
    holding those user messages (``chunks=[drafts]`` for other chunks)."""

    class Meta:
        model = Session

    project = factory.SubFactory(ProjectFactory)
    title = factory.Sequence(lambda n: f"session {n}")
    messages: tuple[str, ...] = ()
    chunks: tuple[Any, ...] = ()
    metadata = factory.LazyFunction(dict)

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Session:
        drafts = [message(text) for text in kwargs.pop("messages")] + list(kwargs.pop("chunks"))
        return services.session_create(chunks=drafts, **kwargs)


class ChunkFactory(ServiceFactory):
    """One chunk appended at the end of ``session`` through ``chunks_append``."""

    class Meta:
        model = Chunk

    session = factory.SubFactory(SessionFactory)
    role = "user"
    kind = "message"
    content = factory.Sequence(lambda n: {"text": f"chunk {n}"})

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Chunk:
        session = kwargs.pop("session")
        (chunk,) = services.chunks_append(session=session, drafts=[make_draft(**kwargs)])
        return chunk
