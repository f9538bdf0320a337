"""The base stream consumer: authorise, join the group, backfill from the database, go live.

Delivery is exactly-once and in order because the database is the only source of items: the
consumer joins its group *before* the backfill, tracks ``last_sent``, and treats every group
message as a hint ("committed up to N"). A hint beyond ``last_sent`` makes it read everything
after ``last_sent`` from the database, in order; a late, repeated or out-of-order hint finds
nothing new. A lost hint is repaired by the next one, by the periodic catch-up, or by the
client reconnecting with ``after=``. See ``docs/streaming.md``.

Every database access runs through ``database_sync_to_async`` (:func:`db_call`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from openrath_project import metrics
from openrath_project.errors import NotFound, error_body
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.services import audit_record
from openrath_project.ws.auth import IDENTITY_SCOPE_KEY, SUBPROTOCOL, Identity, reidentify
from openrath_project.ws.consumer_loop import note_consumer_loop
from openrath_project.ws.db import db_call
from openrath_project.ws.limits import limiter, max_per_principal
from openrath_project.ws.reads import shared_reads

logger = logging.getLogger(__name__)

#: Close codes (before accept: the refusal; after accept: the periodic re-check).
CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY = 4429
CLOSE_INTERNAL = 1011

_REFUSALS: dict[int, tuple[int, str, str]] = {
    # close code: (HTTP status, error code, message) -- nothing about the object, ever.
    CLOSE_BAD_REQUEST: (400, "invalid", "invalid 'after' parameter"),
    CLOSE_UNAUTHENTICATED: (
        401,
        "not_authenticated",
        "authentication required: send 'Authorization: Bearer <token>'",
    ),
    CLOSE_FORBIDDEN: (403, "permission_denied", "this stream needs a grant the caller lacks"),
    CLOSE_NOT_FOUND: (404, "not_found", "not found"),
    CLOSE_TOO_MANY: (429, "rate_limited", "too many open streams for this principal"),
}

#: Items one database read returns at most.
PAGE_SIZE = 200


def recheck_seconds() -> float:
    return float(getattr(settings, "OPENRATH_WS_RECHECK_SECONDS", 30))


@dataclass
class Batch:
    """One read: text frames in order, the position of the last item read, whether the read
    reached the end of what is committed, and anything a subclass wants to look at."""

    frames: list[str]
    last: int
    complete: bool
    extra: dict[str, Any] = field(default_factory=dict)


class Refused(Exception):
    def __init__(self, close_code: int, reason: str) -> None:
        super().__init__(reason)
        self.close_code = close_code
        self.reason = reason


def dumps(message: dict[str, Any]) -> str:
    from django.core.serializers.json import DjangoJSONEncoder

    return json.dumps(message, cls=DjangoJSONEncoder, separators=(",", ":"))


class StreamConsumer(AsyncWebsocketConsumer):
    """One object's stream. Subclasses say which grant, how to load the object in scope,
    how to name its group, and how to read a batch after a position."""

    object_type: ClassVar[str]
    #: The ``stream`` label of ``openrath_websocket_connections``.
    stream: ClassVar[str]
    grant: ClassVar[str]
    url_kwarg: ClassVar[str]
    #: ``after`` when the client gives none, and the least it may give.
    default_after: ClassVar[int]
    min_after: ClassVar[int]

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its per-message ``close_old_connections`` hop through the
        one thread-sensitive thread (a hint fans out to every consumer of an object, and that
        hop serialised them all): these consumers touch the database only through
        :func:`db_call`, which closes obsolete connections on its own threads."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    # --- subclass hooks (sync ones run on the database pool) --------------------------------

    def load_object(self, principal: Principal, object_id: object) -> Any:
        """The object in the principal's scope; :class:`NotFound` otherwise."""
        raise NotImplementedError

    def group_for(self, obj: Any) -> str:
        raise NotImplementedError

    def read_after(self, after: int) -> Batch:
        raise NotImplementedError

    async def after_batch(self, batch: Batch) -> None:
        """Called after a batch's frames went out (the run stream adds status messages)."""

    # --- connection ---------------------------------------------------------------------------

    async def connect(self) -> None:
        self.identity: Identity | None = None
        self.principal: Principal | None = None
        self.object: Any = None
        self.group: str | None = None
        self.last_sent = 0
        self.closed = False
        self._lock = asyncio.Lock()
        self._ticker: asyncio.Task[None] | None = None
        self._slot: tuple[str, str] | None = None
        self._counted = False
        object_id = self.scope.get("url_route", {}).get("kwargs", {}).get(self.url_kwarg)
        try:
            await self._authorise(object_id)
        except Refused as refusal:
            await self._refuse(refusal, object_id)
            return
        note_consumer_loop()  # the in-memory layer's hints are sent on this loop
        offered = self.scope.get("subprotocols") or ()
        await self.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        metrics.ws_connected(self.stream)
        self._counted = True
        assert self.group is not None
        try:
            # The group first: a commit after this point sends a hint this consumer will see,
            # a commit before it is in the backfill. Hence no gap, whatever the timing.
            await self.channel_layer.group_add(self.group, self.channel_name)
            await self.catch_up()
        except Exception:  # layer or database away: close; disconnect() releases the slot
            logger.exception("%s stream: could not start", self.object_type)
            await self._close(CLOSE_INTERNAL)
            return
        await self._send_frame({"type": "ready", "after": self.last_sent})
        self._ticker = asyncio.create_task(self._recheck_forever())

    async def _authorise(self, object_id: object) -> None:
        identity = self.scope.get(IDENTITY_SCOPE_KEY)
        if not isinstance(identity, Identity):
            raise Refused(CLOSE_UNAUTHENTICATED, "no authentication middleware")
        self.identity = identity
        if identity.principal is None:
            code = CLOSE_FORBIDDEN if identity.status == 403 else CLOSE_UNAUTHENTICATED
            raise Refused(code, identity.reason)
        principal = identity.principal
        if not principal.has_grant(self.grant):
            raise Refused(CLOSE_FORBIDDEN, f"missing grant {self.grant}")
        try:
            self.object = await db_call(self.load_object)(principal, object_id)
        except NotFound as exc:
            raise Refused(CLOSE_NOT_FOUND, "not found or out of scope") from exc
        self.principal = principal
        self.last_sent = self._parse_after()
        self.group = self.group_for(self.object)
        key = f"{principal.tenant_id}:{principal.actor}"
        connection = uuid.uuid4().hex
        if not await limiter().acquire(key, connection, max_per_principal()):
            raise Refused(CLOSE_TOO_MANY, "connection limit")
        self._slot = (key, connection)

    def _parse_after(self) -> int:
        query = parse_qs(bytes(self.scope.get("query_string", b"")).decode("latin-1"))
        values = query.get("after")
        if not values:
            return self.default_after
        try:
            after = int(values[-1])
        except ValueError:
            raise Refused(CLOSE_BAD_REQUEST, "after is not an integer") from None
        if after < self.min_after:
            raise Refused(CLOSE_BAD_REQUEST, "after out of range")
        return after

    async def _refuse(self, refusal: Refused, object_id: object) -> None:
        status, code, message = _REFUSALS[refusal.close_code]
        if refusal.close_code != CLOSE_BAD_REQUEST:
            await self._audit_denial(status, refusal.reason, object_id, action="ws.connect")
        self.closed = True
        if "websocket.http.response" in (self.scope.get("extensions") or {}):
            # The server can answer the handshake with a plain HTTP response (ASGI denial
            # response extension, e.g. uvicorn): clients see 401/403/404/429 and the error body.
            headers = [(b"content-type", b"application/json")]
            if status == 401:
                headers.append((b"www-authenticate", b'Bearer realm="openrath"'))
            await self.base_send(
                {"type": "websocket.http.response.start", "status": status, "headers": headers}
            )
            await self.base_send(
                {
                    "type": "websocket.http.response.body",
                    "body": dumps(error_body(code, message)).encode(),
                }
            )
            return
        await self.close(code=refusal.close_code)

    async def _audit_denial(self, status: int, reason: str, object_id: object, action: str) -> None:
        identity = self.identity
        principal = identity.principal if identity is not None else None
        try:
            await db_call(audit_record)(
                actor=principal.actor
                if principal
                else (identity.actor if identity else "anonymous"),
                action=action,
                outcome="denied",
                tenant=principal.tenant if principal else (identity.tenant if identity else None),
                object_type=self.object_type,
                object_id=str(object_id or ""),
                status_code=status,
                request_id=identity.request_id if identity else "",
                details={
                    "transport": "websocket",
                    "path": str(self.scope.get("path", ""))[:300],
                    "reason": reason,
                },
            )
        except Exception:  # an audit failure must be loud, but must not break the refusal
            logger.exception("could not write the audit event of a WebSocket denial")

    # --- delivery -----------------------------------------------------------------------------

    async def catch_up(self, position: int | None = None) -> None:
        """Send everything committed after ``last_sent``, in order (one caller at a time).

        ``position``: what the hint that asked for this announced; another consumer's read
        that shows it is used instead of a read of our own (:mod:`.reads`)."""
        asked = time.monotonic()

        def shows_position(batch: Batch) -> bool:
            return position is not None and (not batch.complete or batch.last >= position)

        async with self._lock:
            while not self.closed:
                after = self.last_sent
                batch = await shared_reads().read(
                    (str(self.group), after),
                    functools.partial(db_call(self.read_after), after),
                    not_before=asked,
                    good_enough=shows_position,
                )
                for frame in batch.frames:
                    await self._send_text(frame)
                self.last_sent = batch.last
                await self.after_batch(batch)
                if batch.complete:
                    return

    async def on_position_hint(self, position: int) -> None:
        """A group hint: everything up to ``position`` is committed."""
        if position <= self.last_sent or self.closed:
            return  # late, repeated or out of order: already sent
        try:
            await self.catch_up(position)
        except Exception:  # the database is away: the next hint or the re-check retries
            logger.exception("%s stream: catch-up failed", self.object_type)

    async def send_frame(self, message: dict[str, Any]) -> None:
        async with self._lock:
            await self._send_frame(message)

    async def _send_frame(self, message: dict[str, Any]) -> None:
        await self._send_text(dumps(message))

    async def _send_text(self, text: str) -> None:
        if self.closed:
            return
        try:
            await self.send(text_data=text)
        except OSError:  # the client went away mid-send (uvicorn: ClientDisconnected)
            self.closed = True

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The stream is one-way; what the client sends is ignored."""

    # --- periodic re-check --------------------------------------------------------------------

    async def _recheck_forever(self) -> None:
        interval = recheck_seconds()
        while not self.closed:
            await asyncio.sleep(interval)
            try:
                verdict = await db_call(self._recheck)()
            except Exception:
                logger.exception("%s stream: re-check failed; trying again", self.object_type)
                continue
            if verdict is not None:
                code, reason = verdict
                status = _REFUSALS[code][0]
                await self._audit_denial(
                    status, reason, getattr(self.object, "pk", ""), action="ws.recheck"
                )
                await self._close(code)
                return
            if self._slot is not None:
                await limiter().refresh(*self._slot)
            try:
                await self.catch_up()  # repairs a lost hint within one interval
            except Exception:
                logger.exception("%s stream: catch-up failed; trying again", self.object_type)

    def _recheck(self) -> tuple[int, str] | None:
        """Is the socket still allowed? (sync) ``None``, or ``(close code, reason)``."""
        assert self.identity is not None
        fresh = reidentify(self.identity)
        if fresh.principal is None:
            code = CLOSE_FORBIDDEN if fresh.status == 403 else CLOSE_UNAUTHENTICATED
            return code, fresh.reason
        if not fresh.principal.has_grant(self.grant):
            return CLOSE_FORBIDDEN, f"missing grant {self.grant}"
        try:
            self.load_object(fresh.principal, self.object.pk)
        except NotFound:
            return CLOSE_NOT_FOUND, "out of scope"
        self.identity = fresh
        self.principal = fresh.principal
        return None

    # --- closing ------------------------------------------------------------------------------

    async def _close(self, code: int) -> None:
        if not self.closed:
            self.closed = True
            await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        self.closed = True
        if getattr(self, "_counted", False):
            self._counted = False
            metrics.ws_disconnected(self.stream)
        ticker = getattr(self, "_ticker", None)
        if ticker is not None and ticker is not asyncio.current_task():
            ticker.cancel()
        slot = getattr(self, "_slot", None)
        if slot is not None:
            self._slot = None
            await limiter().release(*slot)
        if getattr(self, "group", None) is not None and self.principal is not None:
            try:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            except Exception:  # the layer expires the membership on its own
                logger.warning("%s stream: could not leave its group", self.object_type)
