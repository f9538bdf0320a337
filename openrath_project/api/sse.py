"""Server-Sent Events: one object's committed items as a ``text/event-stream`` response.

The same algorithm as the WebSocket streams (``openrath_project.ws.consumers``,
``docs/streaming.md``), over plain HTTP: the database is the only source of items, channel-layer
messages are hints. The view authenticates, checks the grant and loads the object through the
scoping selector like every other API read (401 / 403 / 404 before a byte of the stream), takes
a slot of the per-principal stream limit (429), and answers with an asynchronous body that

1. joins the object's group (a process-local channel of the channel layer) *before* reading;
2. backfills everything after the client's position (``Last-Event-ID``, else ``?after=``);
3. goes live: a hint "committed up to N" beyond the last item sent reads everything after it
   from the database, in order; a late, repeated or out-of-order hint reads nothing new.

Every item carries its ``seq`` as the SSE ``id``, so a client that reconnects (browsers'
``EventSource`` does it on its own) resumes after the last item it received: nothing lost,
nothing repeated. Keep-alive comments flow while nothing else does; every
``OPENRATH_WS_RECHECK_SECONDS`` the stream re-validates the credentials, the grant and the
object's scope (``event: error`` and the end of the body if one is gone), refreshes its slot
and catches up from the database (which repairs a lost hint).

The body runs on the ASGI server's event loop (``manage.py serve``, uvicorn). Under WSGI there
is no loop to wait on, so the response is the backfill only, as with ``follow=false``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponseBase, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.views import ScopedAPIView
from openrath_project.errors import NotFound, RateLimited, ValidationFailed, error_body
from openrath_project.tenancy.principal import Principal
from openrath_project.ws.auth import Identity, reidentify
from openrath_project.ws.consumer_loop import note_consumer_loop
from openrath_project.ws.db import db_call
from openrath_project.ws.limits import MemoryLimiter, limiter, max_per_principal
from openrath_project.ws.reads import shared_reads

logger = logging.getLogger(__name__)

MEDIA_TYPE = "text/event-stream"
#: Items one database read returns at most.
PAGE_SIZE = 200
#: Token deltas held for a slow client at most (best effort: older ones are dropped).
MAX_HELD_DELTAS = 1000
#: The reconnection delay (ms) the stream asks ``EventSource`` for.
RETRY_MS = 2000


#: One event of a stream as the OpenAPI document describes it: a Server-Sent Events frame,
#: its ``event`` name, its ``id`` (the item's seq) and its ``data`` (the message, JSON text).
EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "id": {"type": "string"},
        "data": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


#: The OpenAPI parameters both streams share (the resume header; no ``?format=`` override).
RESUME_PARAMETERS = [
    OpenApiParameter(
        "Last-Event-ID",
        str,
        OpenApiParameter.HEADER,
        description="The id of the last event received (sent by EventSource when it "
        "reconnects): wins over `after`.",
    ),
    # DRF's ?format= renderer override: not accepted here (the stream is the only answer).
    OpenApiParameter("format", exclude=True),
]


def keepalive_seconds() -> float:
    return float(getattr(settings, "OPENRATH_SSE_KEEPALIVE_SECONDS", 15))


def recheck_seconds() -> float:
    return float(getattr(settings, "OPENRATH_WS_RECHECK_SECONDS", 30))


def _json(message: dict[str, Any]) -> str:
    return json.dumps(message, cls=DjangoJSONEncoder, separators=(",", ":"))


def sse_frame(event: str, message: dict[str, Any], *, event_id: int | None = None) -> str:
    """One SSE event: ``id`` (the item's seq, when it has one), ``event``, one ``data`` line
    (compact JSON holds no newline)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {_json(message)}\n\n"


@dataclass
class Batch:
    """One read: encoded frames in order, the seq of the last item read, whether the read
    reached the end of what is committed, and what the subclass wants to look at."""

    frames: list[str]
    last: int
    complete: bool
    extra: dict[str, Any] = field(default_factory=dict)


class EventStreamRenderer(BaseRenderer):
    """Lets content negotiation accept ``Accept: text/event-stream``; the stream itself is a
    :class:`StreamingHttpResponse`, and errors are rendered as JSON (:meth:`finalize_response`)."""

    media_type = MEDIA_TYPE
    format = "sse"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        return _json(data).encode() if data is not None else b""


def _run_now(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Drive a coroutine that never suspends (the in-memory limiter's) to its end, outside
    any event loop."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise RuntimeError("the coroutine suspended")


class _Slot:
    """A connection slot of the per-principal limit, released exactly once: by the body when it
    ends, or, when the client left before the body started (Django then never iterates it),
    when the stream is collected. A Redis entry that is never released expires on its own."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.connection = uuid.uuid4().hex
        self.held = False

    def acquire(self) -> bool:
        self.held = bool(
            async_to_sync(limiter().acquire)(self.key, self.connection, max_per_principal())
        )
        return self.held

    async def refresh(self) -> None:
        if self.held:
            await limiter().refresh(self.key, self.connection)

    async def release(self) -> None:
        if self.held:
            self.held = False
            await limiter().release(self.key, self.connection)

    def __del__(self) -> None:
        if self.held:
            self.held = False
            found = limiter()
            if isinstance(found, MemoryLimiter):
                _run_now(found.release(self.key, self.connection))


class EventStreamView(ScopedAPIView):
    """``GET`` one object's stream. Subclasses set the grant, the URL keyword, the position
    range, and implement :meth:`load_object`, :meth:`group_for`, :meth:`read_after` and
    :meth:`position_of` (and :meth:`passthrough` / :meth:`after_batch` when they need them)."""

    renderer_classes: ClassVar[list[type[BaseRenderer]]] = [JSONRenderer, EventStreamRenderer]  # type: ignore[misc]
    pagination_class = None
    filter_backends: ClassVar[list[Any]] = []  # type: ignore[misc]
    object_type: ClassVar[str]
    url_kwarg: ClassVar[str]
    #: The position when the client gives none, and the least it may give.
    default_after: ClassVar[int]
    min_after: ClassVar[int]
    #: The hint message types carrying a position; the others go to :meth:`passthrough`.
    hint_types: ClassVar[frozenset[str]]

    # --- subclass hooks (the sync ones run on the streaming database pool) -------------------

    def load_object(self, principal: Principal, object_id: object) -> Any:
        """The object in the principal's scope; :class:`NotFound` otherwise."""
        raise NotImplementedError

    def group_for(self, obj: Any) -> str:
        raise NotImplementedError

    @classmethod
    def read_after(cls, stream: Stream, after: int) -> Batch:
        """The next page of items after ``after`` (sync)."""
        raise NotImplementedError

    @classmethod
    def position_of(cls, message: dict[str, Any]) -> int:
        """The position a hint announces as committed."""
        raise NotImplementedError

    @classmethod
    def passthrough(cls, message: dict[str, Any]) -> str | None:
        """The frame for a group message that is not a position hint (``None``: ignore it)."""
        return None

    @classmethod
    def after_batch(cls, stream: Stream, batch: Batch) -> list[str]:
        """Frames to send after a batch (status messages); may set ``stream.finished``."""
        return []

    # --- the request --------------------------------------------------------------------------

    def allowed_query_params(self) -> set[str] | None:
        return {"after", "follow"}

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """``response`` is the stream (a :class:`StreamingHttpResponse`, which DRF passes
        through) or an error's :class:`Response`."""
        if isinstance(response, Response):
            # An error answers JSON, the documented body, whatever the client accepted.
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)

    def _position(self, request: Request) -> int:
        """``Last-Event-ID`` (what ``EventSource`` sends when it reconnects) wins over
        ``?after=`` (the position the client first asked for)."""
        header = request.META.get("HTTP_LAST_EVENT_ID")
        name, raw = (
            ("Last-Event-ID", header)
            if header not in (None, "")
            else ("after", request.query_params.get("after"))
        )
        if raw is None:
            return self.default_after
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ValidationFailed(
                f"{name} must be an integer", details={name: ["not an integer"]}
            ) from None
        if value < self.min_after:
            raise ValidationFailed(
                f"{name} must be at least {self.min_after}",
                details={name: [f"at least {self.min_after}"]},
            )
        return value

    def _follow(self, request: Request) -> bool:
        raw = request.query_params.get("follow")
        if raw is None:
            return True
        if raw.lower() in ("true", "1"):
            return True
        if raw.lower() in ("false", "0"):
            return False
        raise ValidationFailed(
            "follow must be true or false", details={"follow": ["not a boolean"]}
        )

    def get(self, request: Request, **kwargs: Any) -> HttpResponseBase:
        principal = self.principal
        obj = self.load_object(principal, kwargs[self.url_kwarg])
        self.audit(object_id=obj.pk, project=getattr(obj, "project", None))
        after = self._position(request)
        # HEAD says what GET would answer without waiting for what a GET would stream.
        follow = (
            self._follow(request)
            and isinstance(request._request, ASGIRequest)
            and request.method != "HEAD"
        )
        slot = _Slot(f"{principal.tenant_id}:{principal.actor}")
        if not slot.acquire():
            raise RateLimited(
                "too many open streams for this principal",
                retry_after=5,
                details={"limit": max_per_principal()},
            )
        session = getattr(request._request, "session", None)
        identity = Identity(
            principal,
            0,
            "",
            principal.actor,
            principal.tenant,
            str(getattr(request._request, "request_id", "") or ""),
            getattr(session, "session_key", None) if principal.token is None else None,
        )
        stream = Stream(type(self), identity, obj, self.group_for(obj), after, follow, slot)
        response = StreamingHttpResponse(stream.body(), content_type=f"{MEDIA_TYPE}; charset=utf-8")
        response["Cache-Control"] = "no-cache, no-store"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
        return response


class Stream:
    """One open stream: its position, its hints, and the body that sends it."""

    def __init__(
        self,
        view: type[EventStreamView],
        identity: Identity,
        obj: Any,
        group: str,
        after: int,
        follow: bool,
        slot: _Slot,
    ) -> None:
        self.view = view
        self.identity = identity
        self.object = obj
        self.group = group
        self.last_sent = after
        self.follow = follow
        self.slot = slot
        #: Set by :meth:`EventStreamView.after_batch` when the stream has said everything.
        self.finished = False
        #: Free for the subclass (the run stream keeps the status last sent).
        self.notes: dict[str, Any] = {}
        self._hinted = after
        self._deltas: collections.deque[str] = collections.deque(maxlen=MAX_HELD_DELTAS)
        self._wake = asyncio.Event()

    @property
    def principal(self) -> Principal:
        principal = self.identity.principal
        assert principal is not None
        return principal

    # --- hints --------------------------------------------------------------------------------

    async def _receive(self, layer: Any, channel: str) -> None:
        """Drain the channel into ``_hinted`` / ``_deltas`` (never cancelled mid-read by a
        timer: only when the stream ends)."""
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # the layer is away: hints stop, the re-check still catches up
                logger.warning("%s SSE stream: channel receive failed", self.view.object_type)
                await asyncio.sleep(1.0)
                continue
            if message.get("type") in self.view.hint_types:
                self._hinted = max(self._hinted, self.view.position_of(message))
            else:
                frame = self.view.passthrough(message)
                if frame is None:
                    continue
                self._deltas.append(frame)
            self._wake.set()

    # --- delivery -----------------------------------------------------------------------------

    async def _catch_up(self, position: int | None = None) -> AsyncIterator[str]:
        """Everything committed after ``last_sent``, in order; streams of one object in one
        process share a read that shows what the hint announced (``openrath_project.ws.reads``)."""
        asked = time.monotonic()

        def shows_position(batch: Batch) -> bool:
            return position is not None and (not batch.complete or batch.last >= position)

        def fetch(after: int) -> Callable[[], Awaitable[Batch]]:
            return lambda: db_call(self.view.read_after)(self, after)

        while True:
            after = self.last_sent
            batch = await shared_reads().read(
                (f"sse:{self.group}", after),
                fetch(after),
                not_before=asked,
                good_enough=shows_position,
            )
            for frame in batch.frames:
                yield frame
            self.last_sent = batch.last
            for frame in self.view.after_batch(self, batch):
                yield frame
            if batch.complete:
                return

    def _recheck(self) -> tuple[int, str, str] | None:
        """Is the stream still allowed? (sync) ``None``, or ``(status, code, message)``."""
        fresh = reidentify(self.identity)
        if fresh.principal is None:
            if fresh.status == 403:
                return 403, "permission_denied", "this login is no longer a member of the tenant"
            return 401, "not_authenticated", "the credentials are no longer valid"
        if not fresh.principal.has_grant(self.view.grants["GET"]):
            return 403, "permission_denied", "this stream needs a grant the caller lacks"
        try:
            self.view().load_object(fresh.principal, self.object.pk)
        except NotFound:
            return 404, "not_found", "not found"
        self.identity = fresh
        return None

    async def body(self) -> AsyncIterator[str]:
        """The response body (see the module docstring)."""
        layer: Any = None
        channel = ""
        receiver: asyncio.Task[None] | None = None
        try:
            yield f"retry: {RETRY_MS}\n\n"
            if self.follow:
                note_consumer_loop()  # the in-memory layer's hints are sent on this loop
                layer = get_channel_layer()
                channel = await layer.new_channel()
                # The group first: a commit after this point sends a hint this stream sees,
                # a commit before it is in the backfill. Hence no gap, whatever the timing.
                await layer.group_add(self.group, channel)
                receiver = asyncio.create_task(self._receive(layer, channel))
            async for frame in self._catch_up():
                yield frame
            yield sse_frame("ready", {"type": "ready", "after": self.last_sent})
            if not self.follow or self.finished:
                return
            async for frame in self._live():
                yield frame
        finally:
            if receiver is not None:
                receiver.cancel()
            if layer is not None:
                try:
                    await layer.group_discard(self.group, channel)
                except Exception:  # the layer expires the membership on its own
                    logger.warning(
                        "%s SSE stream: could not leave its group", self.view.object_type
                    )
            await self.slot.release()

    async def _live(self) -> AsyncIterator[str]:
        keepalive = keepalive_seconds()
        interval = recheck_seconds()
        last_write = time.monotonic()
        next_recheck = last_write + interval
        while True:
            timeout = max(0.0, min(last_write + keepalive, next_recheck) - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            self._wake.clear()
            while self._deltas:
                yield self._deltas.popleft()
                last_write = time.monotonic()
            if self._hinted > self.last_sent:
                try:
                    async for frame in self._catch_up(self._hinted):
                        yield frame
                        last_write = time.monotonic()
                except Exception:  # the database is away: the next hint or the re-check retries
                    logger.exception("%s SSE stream: catch-up failed", self.view.object_type)
            if self.finished:
                return
            now = time.monotonic()
            if now >= next_recheck:
                next_recheck = now + interval
                try:
                    verdict = await db_call(self._recheck)()
                except Exception:
                    logger.exception("%s SSE stream: re-check failed", self.view.object_type)
                    verdict = None
                if verdict is not None:
                    status, code, message = verdict
                    yield sse_frame(
                        "error", {"type": "error", "status": status, **error_body(code, message)}
                    )
                    return
                await self.slot.refresh()
                try:
                    async for frame in self._catch_up():  # repairs a lost hint
                        yield frame
                        last_write = time.monotonic()
                except Exception:
                    logger.exception("%s SSE stream: catch-up failed", self.view.object_type)
                if self.finished:
                    return
            if time.monotonic() - last_write >= keepalive:
                yield ": keep-alive\n\n"
                last_write = time.monotonic()


__all__ = [
    "MEDIA_TYPE",
    "PAGE_SIZE",
    "Batch",
    "EventStreamRenderer",
    "EventStreamView",
    "Stream",
    "sse_frame",
]
