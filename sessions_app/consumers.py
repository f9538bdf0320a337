"""The session stream, ``ws/sessions/<id>/?after=<seq>``: committed chunks and token deltas.

Chunks come from the database (the logical list, base chain included); group messages are
hints. See :mod:`openrath_project.ws.consumers` and ``docs/streaming.md``.
"""

from __future__ import annotations

from typing import Any

from openrath_project.tenancy.principal import Principal
from openrath_project.ws.consumers import PAGE_SIZE, Batch, StreamConsumer, dumps
from sessions_app.api.serializers import ChunkOut
from sessions_app.models import Session
from sessions_app.selectors import chunk_page, session_get
from sessions_app.streaming import session_group


class SessionStreamConsumer(StreamConsumer):
    """``{"type": "chunk"}`` for every committed chunk after ``after``, once, in order;
    ``{"type": "delta"}`` for model output as it is generated (best effort, not stored)."""

    object_type = "session"
    stream = "sessions"
    grant = "sessions:read"
    url_kwarg = "session_id"
    default_after = -1
    min_after = -1

    def load_object(self, principal: Principal, object_id: object) -> Session:
        return session_get(principal=principal, session_id=object_id)

    def group_for(self, obj: Any) -> str:
        return session_group(obj.id)

    def read_after(self, after: int) -> Batch:
        chunks = chunk_page(self.object.id, after=after, limit=PAGE_SIZE)
        frames = [dumps({"type": "chunk", "chunk": ChunkOut(chunk).data}) for chunk in chunks]
        return Batch(
            frames=frames,
            last=chunks[-1].seq if chunks else after,
            complete=len(chunks) < PAGE_SIZE,
        )

    async def stream_chunks(self, message: dict[str, Any]) -> None:
        """Hint: the session's chunks up to ``last`` are committed."""
        await self.on_position_hint(int(message["last"]))

    async def stream_delta(self, message: dict[str, Any]) -> None:
        """Model output being generated: forwarded as it comes."""
        await self.send_frame(
            {
                "type": "delta",
                "agent": message["agent"],
                "turn": message["turn"],
                "delta": message["delta"],
            }
        )
