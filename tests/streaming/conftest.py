"""WebSocket stream fixtures: the real ASGI application, communicators, a chunk writer.

The consumer reads on its own database threads, so these tests commit (``transaction=True``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.db import connection

from openrath_project.asgi import application
from openrath_project.publisher import HintPublisher, installed_publisher
from openrath_project.ws.db import close_db_pool
from sessions_app import services
from sessions_app.models import Session
from tests.runs_app.conftest import registry  # noqa: F401 - the runs fixture, reused here
from tests.sessions_app.conftest import msg

#: The wait for a message that must arrive (generous: a loaded machine delays but never drops it).
TIMEOUT = 30


def bearer(raw: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {raw}".encode())]


async def open_stream(
    path: str,
    *,
    headers: Iterable[tuple[bytes, bytes]] = (),
    subprotocols: Iterable[str] = (),
    extensions: dict[str, Any] | None = None,
) -> tuple[WebsocketCommunicator, bool, Any]:
    """Connect to the real application; returns ``(communicator, accepted, subprotocol/code)``."""
    communicator = WebsocketCommunicator(
        application, path, headers=list(headers), subprotocols=list(subprotocols)
    )
    if extensions is not None:
        communicator.scope["extensions"] = extensions
    accepted, detail = await communicator.connect(timeout=TIMEOUT)
    return communicator, accepted, detail


async def refused_with(path: str, **kwargs: Any) -> int:
    """The close code of a refused handshake (fails the test if it was accepted)."""
    communicator, accepted, detail = await open_stream(path, **kwargs)
    await communicator.disconnect()
    assert not accepted, f"{path} was accepted"
    return int(detail)


async def receive_until_ready(communicator: WebsocketCommunicator) -> list[dict[str, Any]]:
    """Every message up to and including ``ready``."""
    messages = []
    while True:
        message = await communicator.receive_json_from(timeout=TIMEOUT)
        messages.append(message)
        if message["type"] == "ready":
            return messages


async def receive_n(communicator: WebsocketCommunicator, count: int) -> list[dict[str, Any]]:
    return [await communicator.receive_json_from(timeout=TIMEOUT) for _ in range(count)]


def chunk_seqs(messages: list[dict[str, Any]]) -> list[int]:
    return [m["chunk"]["seq"] for m in messages if m["type"] == "chunk"]


def chunk_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["chunk"]["content"]["text"] for m in messages if m["type"] == "chunk"]


async def in_thread(fn: Callable[[], Any]) -> Any:
    """Run blocking database code on a fresh thread (its own connection, closed after)."""

    def wrapped() -> Any:
        try:
            return fn()
        finally:
            connection.close()

    return await asyncio.to_thread(wrapped)


def append_texts(session_id: uuid.UUID, texts: Iterable[str]) -> None:
    """One committed append per text (each publishes its own hint after commit)."""
    for text in texts:
        row = Session.objects.get(id=session_id)
        services.chunks_append(session=row, drafts=[msg(text)])


@pytest.fixture(autouse=True)
def _close_stream_connections():
    """channels' communicator turns off ``close_old_connections`` while it runs the app, so the
    consumers' pool threads keep their connections: close them after each test."""
    yield
    close_db_pool()


@pytest.fixture
def hints() -> HintPublisher:
    """The process's publisher (installed by importing the ASGI application)."""
    found = installed_publisher()
    assert found is not None
    return found


@pytest.fixture
def session_with(project) -> Callable[..., Session]:
    def make(count: int, *, project=project, prefix: str = "c") -> Session:
        return services.session_create(
            project=project, title="stream", chunks=[msg(f"{prefix}{i}") for i in range(count)]
        )

    return make
