"""The session event stream, ``GET /api/v1/sessions/<id>/stream/`` (Server-Sent Events).

The session's committed chunks (its logical list, base chain included) with their ``seq`` as
the SSE ``id``, and model token deltas as they are generated. The algorithm and the guarantees
are the WebSocket stream's (:mod:`openrath_project.api.sse`, ``docs/streaming.md``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from openrath_project.api.sse import (
    EVENT_SCHEMA,
    PAGE_SIZE,
    RESUME_PARAMETERS,
    Batch,
    EventStreamView,
    Stream,
    sse_frame,
)
from openrath_project.tenancy.principal import Principal
from sessions_app.api.serializers import ChunkOut
from sessions_app.models import Session
from sessions_app.selectors import chunk_page, session_get
from sessions_app.streaming import session_group

STREAM_PARAMETERS = [
    OpenApiParameter(
        "after",
        int,
        OpenApiParameter.QUERY,
        description="Send the chunks after this seq (default -1: from the first chunk; at "
        "least -1).",
    ),
    OpenApiParameter(
        "follow",
        bool,
        OpenApiParameter.QUERY,
        description="true (default): stay open and send chunks as they are committed; "
        "false: send what is committed, then end.",
    ),
    *RESUME_PARAMETERS,
]


@extend_schema(
    parameters=STREAM_PARAMETERS,
    description=(
        "The session's chunks as Server-Sent Events, resumable with `Last-Event-ID` or `?after=`, "
        "with the exactly-once, in-order delivery of `ws/sessions/<id>/` (docs/streaming.md, "
        "'Server-Sent Events'). Served by the ASGI server (`manage.py serve`)."
    ),
    responses={
        (200, "text/event-stream"): OpenApiResponse(
            EVENT_SCHEMA,
            description="Server-Sent Events: `chunk` (id = the chunk's seq; data "
            '`{"type": "chunk", "chunk": {...}}`, the fields of the chunks list), `delta` '
            "(model output while it is generated, best effort), `ready` (the backfill is "
            "done), `error` (the credentials, grant or scope went away; the stream ends), "
            "and `: keep-alive` comments. Every committed chunk after the position arrives "
            "exactly once, in order (docs/streaming.md).",
        )
    },
    summary="Stream the session's chunks (Server-Sent Events)",
)
class SessionEventStreamView(EventStreamView):
    """``event: chunk`` for every committed chunk after the position, once, in order;
    ``event: delta`` for model output as it is generated (not stored, never replayed)."""

    grants: ClassVar[dict[str, str]] = {"GET": "sessions:read"}
    queryset = Session.objects.none()
    object_type = "session"
    url_kwarg = "pk"
    default_after = -1
    min_after = -1
    hint_types: ClassVar[frozenset[str]] = frozenset({"stream.chunks"})

    def scope_queryset(self, principal: Principal) -> Any:
        return Session.objects.for_principal(principal)

    def load_object(self, principal: Principal, object_id: object) -> Session:
        return session_get(principal=principal, session_id=object_id)

    def group_for(self, obj: Any) -> str:
        return session_group(obj.id)

    @classmethod
    def read_after(cls, stream: Stream, after: int) -> Batch:
        chunks = chunk_page(stream.object.id, after=after, limit=PAGE_SIZE)
        frames = [
            sse_frame("chunk", {"type": "chunk", "chunk": ChunkOut(c).data}, event_id=c.seq)
            for c in chunks
        ]
        return Batch(
            frames=frames,
            last=chunks[-1].seq if chunks else after,
            complete=len(chunks) < PAGE_SIZE,
        )

    @classmethod
    def position_of(cls, message: dict[str, Any]) -> int:
        return int(message["last"])

    @classmethod
    def passthrough(cls, message: dict[str, Any]) -> str | None:
        if message.get("type") != "stream.delta":
            return None
        return sse_frame(
            "delta",
            {
                "type": "delta",
                "agent": message["agent"],
                "turn": message["turn"],
                "delta": message["delta"],
            },
        )
