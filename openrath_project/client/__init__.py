"""A client of this product's HTTP API with OpenRath 2.0's method names (``RemoteClient``,
``AsyncRemoteClient``; also ``flow.RemoteClient``). No Django needed: ``httpx2`` only."""

from __future__ import annotations

from openrath_project.client.remote import (
    TERMINAL_STATUSES,
    AsyncRemoteClient,
    RemoteClient,
    RemoteError,
    error_for,
)
from openrath_project.client.sse import EventStreamDecoder, ServerSentEvent

__all__ = [
    "TERMINAL_STATUSES",
    "AsyncRemoteClient",
    "EventStreamDecoder",
    "RemoteClient",
    "RemoteError",
    "ServerSentEvent",
    "error_for",
]
