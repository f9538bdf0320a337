"""The run stream, ``ws/runs/<id>/?after=<seq>``: the run's events and its status changes.

Events come from the database; group messages are hints. See
:mod:`openrath_project.ws.consumers` and ``docs/streaming.md``.
"""

from __future__ import annotations

from typing import Any

from openrath_project.tenancy.principal import Principal
from openrath_project.ws.consumers import PAGE_SIZE, Batch, StreamConsumer, dumps
from runs_app.api.serializers import RunEventOut, run_status
from runs_app.models import Run
from runs_app.selectors import event_page, run_get
from sessions_app.streaming import run_group


class RunStreamConsumer(StreamConsumer):
    """``{"type": "event"}`` for every committed event after ``after``, once, in order, and
    ``{"type": "run"}`` after the event that changed the run's status."""

    object_type = "run"
    stream = "runs"
    grant = "runs:read"
    url_kwarg = "run_id"
    default_after = 0
    min_after = 0
    #: The status the client was last told (``None``: not yet; the backfill always tells it).
    sent_status: str | None = None

    def load_object(self, principal: Principal, object_id: object) -> Run:
        return run_get(principal=principal, run_id=object_id)

    def group_for(self, obj: Any) -> str:
        return run_group(obj.id)

    def read_after(self, after: int) -> Batch:
        # The run row first: its status is the status as of event ``event_seq`` (both change in
        # one transaction), and the events are read up to exactly that one.
        principal = self.principal
        assert principal is not None, "read only after the connection was authorised"
        run = (
            Run.objects.for_principal(principal)
            .only("id", "status", "next_nodes", "error", "event_seq")
            .get(id=self.object.id)
        )
        page = event_page(run, after=after, limit=PAGE_SIZE)
        events = [event for event in page if event.seq <= run.event_seq]
        frames = [dumps({"type": "event", "event": RunEventOut(e).data}) for e in events]
        last = events[-1].seq if events else after
        return Batch(
            frames=frames,
            last=last,
            complete=last >= run.event_seq or len(page) < PAGE_SIZE,
            extra={"run": run_status(run)},
        )

    async def after_batch(self, batch: Batch) -> None:
        run = batch.extra["run"]
        if batch.complete and run["status"] != self.sent_status:
            self.sent_status = run["status"]
            await self._send_frame({"type": "run", "run": run})

    async def stream_event(self, message: dict[str, Any]) -> None:
        """Hint: the run's event ``seq`` is committed."""
        await self.on_position_hint(int(message["seq"]))
