"""The run event stream, ``GET /api/v1/runs/<id>/stream/`` (Server-Sent Events).

The run's committed events with their ``seq`` as the SSE ``id``, a ``run`` message after the
event that changed its status, and the end of the body once the run has ended (succeeded,
failed, cancelled, timed out) and every event up to that end is sent. The algorithm and the
guarantees are the WebSocket stream's (:mod:`openrath_project.api.sse`, ``docs/streaming.md``).
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
from runs_app.api.serializers import RunEventOut, run_status
from runs_app.models import Run
from runs_app.selectors import event_page, run_get
from runs_app.transitions import is_terminal
from sessions_app.streaming import run_group

STREAM_PARAMETERS = [
    OpenApiParameter(
        "after",
        int,
        OpenApiParameter.QUERY,
        description="Send the events after this seq (default 0: from the first event; at least 0).",
    ),
    OpenApiParameter(
        "follow",
        bool,
        OpenApiParameter.QUERY,
        description="true (default): stay open until the run ends; false: send what is "
        "committed, then end.",
    ),
    *RESUME_PARAMETERS,
]


@extend_schema(
    parameters=STREAM_PARAMETERS,
    description=(
        "The run's events as Server-Sent Events, resumable with `Last-Event-ID` or `?after=`, "
        "with the exactly-once, in-order delivery of `ws/runs/<id>/` (docs/streaming.md, "
        "'Server-Sent Events'). Served by the ASGI server (`manage.py serve`)."
    ),
    responses={
        (200, "text/event-stream"): OpenApiResponse(
            EVENT_SCHEMA,
            description="Server-Sent Events: `event` (id = the event's seq; data "
            '`{"type": "event", "event": {...}}`, the fields of the events list), `run` '
            '(`{"type": "run", "run": {"id", "status", "next_nodes", "error"}}` after the '
            "event that changed the status, and once after the backfill), `ready` (the "
            "backfill is done), `error` (the credentials, grant or scope went away), and "
            "`: keep-alive` comments. The body ends once the run has ended and every event "
            "up to its end is sent. Every committed event after the position arrives exactly "
            "once, in order (docs/streaming.md).",
        )
    },
    summary="Stream the run's events (Server-Sent Events)",
)
class RunEventStreamView(EventStreamView):
    """``event: event`` for every committed event after the position, once, in order, and
    ``event: run`` after the event that changed the run's status."""

    grants: ClassVar[dict[str, str]] = {"GET": "runs:read"}
    queryset = Run.objects.none()
    object_type = "run"
    url_kwarg = "pk"
    default_after = 0
    min_after = 0
    hint_types: ClassVar[frozenset[str]] = frozenset({"stream.event"})

    def scope_queryset(self, principal: Principal) -> Any:
        return Run.objects.for_principal(principal)

    def load_object(self, principal: Principal, object_id: object) -> Run:
        return run_get(principal=principal, run_id=object_id)

    def group_for(self, obj: Any) -> str:
        return run_group(obj.id)

    @classmethod
    def read_after(cls, stream: Stream, after: int) -> Batch:
        # The run row first: its status is the status as of event ``event_seq`` (both change in
        # one transaction), and the events are read up to exactly that one.
        run = (
            Run.objects.for_principal(stream.principal)
            .only("id", "status", "next_nodes", "error", "event_seq")
            .get(id=stream.object.id)
        )
        page = event_page(run, after=after, limit=PAGE_SIZE)
        events = [event for event in page if event.seq <= run.event_seq]
        frames = [
            sse_frame("event", {"type": "event", "event": RunEventOut(e).data}, event_id=e.seq)
            for e in events
        ]
        last = events[-1].seq if events else after
        return Batch(
            frames=frames,
            last=last,
            complete=last >= run.event_seq or len(page) < PAGE_SIZE,
            extra={
                "run": run_status(run),
                "event_seq": run.event_seq,
            },
        )

    @classmethod
    def position_of(cls, message: dict[str, Any]) -> int:
        return int(message["seq"])

    @classmethod
    def after_batch(cls, stream: Stream, batch: Batch) -> list[str]:
        if not batch.complete:
            return []
        run = batch.extra["run"]
        frames = []
        if run["status"] != stream.notes.get("status"):
            stream.notes["status"] = run["status"]
            frames.append(sse_frame("run", {"type": "run", "run": run}))
        if is_terminal(run["status"]) and stream.last_sent >= batch.extra["event_seq"]:
            stream.finished = True
        return frames
