"""Publishing hooks: committed chunks and model token deltas.

Services call :func:`chunks_committed` after commit and agents call :func:`token_delta` while a
model generates. Listeners (the Channels publisher, tests) subscribe with :func:`subscribe`.
Messages are hints: the database is the state, and a client can always re-read it.

This is the port between the writers and the stream: the group names below are shared by the
publisher that sends hints (``openrath_project.publisher``, installed by the entry points) and
the consumers that receive them (``sessions_app.consumers``, ``runs_app.consumers``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

Listener = Callable[[str, dict[str, Any]], None]


def session_group(session_id: object) -> str:
    """The channel group of a session's stream."""
    return f"session.{session_id}"


def run_group(run_id: object) -> str:
    """The channel group of a run's stream."""
    return f"run.{run_id}"


_listeners: list[Listener] = []
_lock = threading.Lock()


def subscribe(listener: Listener) -> Callable[[], None]:
    """Register ``listener(event, payload)``; returns a function that unsubscribes it."""
    with _lock:
        _listeners.append(listener)

    def unsubscribe() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return unsubscribe


def _emit(event: str, payload: dict[str, Any]) -> None:
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(event, payload)
        except Exception:  # a broken listener must not break the write that triggered it
            logger.exception("streaming listener failed for %s", event)


def chunks_committed(session_id: uuid.UUID, seqs: tuple[int, int]) -> None:
    """Chunks ``seqs[0]..seqs[1]`` (inclusive) of the session are committed."""
    _emit("chunks", {"session": str(session_id), "first": seqs[0], "last": seqs[1]})


def token_delta(session_id: uuid.UUID, *, agent: str, delta: str, turn: str) -> None:
    """A model is generating text for the session (not stored; the final chunk is)."""
    _emit("delta", {"session": str(session_id), "agent": agent, "delta": delta, "turn": turn})


def run_event_committed(run_id: uuid.UUID, seq: int) -> None:
    """Event ``seq`` of the run is committed."""
    _emit("run_event", {"run": str(run_id), "seq": seq})
