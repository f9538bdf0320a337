"""Session fixtures: build sessions through the services, the one write path."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sessions_app import services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session


def msg(text: str, role: str = "user", **extra) -> object:
    return make_draft(role=role, kind="message", content={"text": text}, **extra)


@pytest.fixture
def make_session(project) -> Callable[..., Session]:
    """``make_session(["a", "b"])``: a root session with those user messages."""

    def make(texts=(), *, project=project, title="t") -> Session:
        return services.session_create(project=project, title=title, chunks=[msg(t) for t in texts])

    return make


def texts(session: Session, upto: int | None = None) -> list[str]:
    from sessions_app.selectors import chunk_all

    return [c.content.get("text", c.kind) for c in chunk_all(session.id, upto=upto)]
