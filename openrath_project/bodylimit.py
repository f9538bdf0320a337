"""The request body limit, enforced while the body arrives: at the ASGI and WSGI entry points.

``OPENRATH_MAX_REQUEST_BYTES`` bounds every request body. Django's ASGI handler reads the whole
body (spooling it to disk) before any middleware runs, and a body sent without
``Content-Length`` (``Transfer-Encoding: chunked``, HTTP/2 streams) has no declared size to
check, so the limit is enforced here, in front of Django:

* a declared ``Content-Length`` above the limit is refused at once: not one body byte is read
  (a client waiting for ``100 Continue`` never sends it);
* a body without ``Content-Length`` is received up to the limit; one byte more and the request
  is refused without reading further. A body within the limit is handed to Django with its
  ``Content-Length`` set, so it parses like any other (it used to parse as empty);
* a malformed ``Content-Length`` is a 400.

The refusal is ``413 payload_too_large`` (``details.limit_bytes``) with ``Connection: close``
(the rest of the body is never read, so the connection cannot carry another request). Nothing
of Django runs for it: no session, no authentication. Its audit event (``request.too_large``,
outcome ``failure``, actor ``anonymous``; for mutating requests on audited paths, as the audit
middleware would write it) and a warning log line carry the request id echoed in
``X-Request-ID``.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from openrath_project.errors import error_body
from openrath_project.jsonlog import log_context

logger = logging.getLogger(__name__)

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_DIGITS_RE = re.compile(r"^[0-9]{1,20}$")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: How much of a WSGI body without a length is read per call.
_WSGI_BLOCK = 64 * 1024

Scope = MutableMapping[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[..., Awaitable[None]]


class MalformedLength(ValueError):
    """The ``Content-Length`` header is not one non-negative integer."""


def accepted_request_id(incoming: str | None) -> str:
    """The caller's well-formed ``X-Request-ID``, else a new one (as the request middleware)."""
    return incoming if incoming and _REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex


def request_limit() -> int:
    return int(settings.OPENRATH_MAX_REQUEST_BYTES)


def declared_length(values: Iterable[str]) -> int | None:
    """The declared body length, ``None`` without a header; several equal values count as one
    (RFC 9110), differing or non-numeric ones raise :class:`MalformedLength`."""
    found = {value.strip() for value in values}
    if not found:
        return None
    if len(found) != 1:
        raise MalformedLength("conflicting Content-Length headers")
    (raw,) = found
    if not _DIGITS_RE.match(raw):
        raise MalformedLength("invalid Content-Length header")
    return int(raw)


def _audited(method: str, path: str) -> bool:
    admin = "/" + str(settings.ADMIN_PATH)
    return method not in SAFE_METHODS and (path.startswith(("/api/", "/console/", admin)))


def _too_large_body(limit: int, size_note: str) -> bytes:
    body = error_body(
        "payload_too_large",
        f"request body {size_note} exceeds the limit of {limit} bytes",
        {"limit_bytes": limit},
    )
    return json.dumps(body).encode()


def _malformed_body(message: str) -> bytes:
    return json.dumps(error_body("malformed_request", message)).encode()


def record_too_large(
    *, method: str, path: str, request_id: str, limit: int, details: dict[str, Any]
) -> None:
    """The refusal's log line and (for audited requests) its audit event (sync: the database).

    An audit failure is logged, never raised: the refusal stands either way."""
    with log_context(request_id=request_id):
        logger.warning(
            "request body too large, refused while receiving: %s %s (%s, limit %d bytes)",
            method,
            path[:300],
            ", ".join(f"{k} {v}" for k, v in details.items()),
            limit,
        )
        if not _audited(method, path):
            return
        from openrath_project.tenancy.services import audit_record

        try:
            audit_record(
                actor="anonymous",
                action="request.too_large",
                outcome="failure",
                status_code=413,
                request_id=request_id,
                details={**details, "method": method, "path": path[:300]},
            )
        except Exception:  # the 413 is sent regardless; the log line above keeps the record
            logger.exception("could not write the audit event for %s %s", method, path[:300])


def _record_in_thread(**kwargs: Any) -> None:
    close_old_connections()
    try:
        record_too_large(**kwargs)
    finally:
        close_old_connections()


def _observe(method: str, started: float) -> None:
    from openrath_project.metrics import HTTP_METHODS, HTTP_REQUEST_DURATION

    HTTP_REQUEST_DURATION.labels(
        method=method if method in HTTP_METHODS else "OTHER",
        route="unmatched",
        status_class="4xx",
    ).observe(time.perf_counter() - started)


# --- ASGI ---------------------------------------------------------------------------------------


def _scope_headers(scope: Scope, name: bytes) -> list[str]:
    return [
        bytes(value).decode("latin-1")
        for key, value in scope.get("headers", [])
        if bytes(key).lower() == name
    ]


class AsgiBodyLimit:
    """ASGI middleware for the ``http`` scope; anything else passes through untouched."""

    def __init__(self, app: AsgiApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        limit = request_limit()
        request_id = accepted_request_id(next(iter(_scope_headers(scope, b"x-request-id")), None))
        try:
            declared = declared_length(_scope_headers(scope, b"content-length"))
        except MalformedLength as exc:
            await _respond(send, 400, _malformed_body(str(exc)), request_id)
            return
        if declared is not None:
            if declared > limit:
                await self._refuse(
                    scope, send, limit, request_id, started, {"content_length": declared}
                )
                return
            await self.app(scope, _Counted(receive, limit), send)
            return
        # No declared length: receive the body here, up to the limit and not one message more.
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away; nothing to answer
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > limit:
                await self._refuse(
                    scope, send, limit, request_id, started, {"received_bytes": size}
                )
                return
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        if body:
            headers = [*scope.get("headers", []), (b"content-length", str(len(body)).encode())]
            scope = {**scope, "headers": headers}
        await self.app(scope, _Replay(body, receive), send)

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        limit: int,
        request_id: str,
        started: float,
        details: dict[str, Any],
    ) -> None:
        method = str(scope.get("method", "")).upper()
        path = str(scope.get("path", ""))
        await sync_to_async(_record_in_thread, thread_sensitive=True)(
            method=method, path=path, request_id=request_id, limit=limit, details=details
        )
        note = (
            f"of {details['content_length']} bytes"
            if "content_length" in details
            else "without Content-Length"
        )
        await _respond(send, 413, _too_large_body(limit, note), request_id)
        _observe(method, started)


class _Replay:
    """The buffered body as one message, then the server's own ``receive`` (disconnects)."""

    def __init__(self, body: bytes, receive: Receive) -> None:
        self.body: bytes | None = body
        self.receive = receive

    async def __call__(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        return await self.receive()


class _Counted:
    """The server's ``receive``, which must not deliver more than the declared length allows.

    The server frames the body by its ``Content-Length``, so this only guards against a server
    that does not: past the limit the application is told the client disconnected."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self.receive = receive
        self.limit = limit
        self.size = 0

    async def __call__(self) -> Message:
        if self.size > self.limit:
            return {"type": "http.disconnect"}
        message = await self.receive()
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.limit:
                logger.error("the server delivered more body bytes than Content-Length declared")
                return {"type": "http.disconnect"}
        return message


async def _respond(send: Send, status: int, body: bytes, request_id: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
                (b"cache-control", b"no-store"),
                (b"x-request-id", request_id.encode()),
                # The rest of the body is never read: the connection cannot be reused.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


# --- WSGI ---------------------------------------------------------------------------------------

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REASONS = {400: "400 Bad Request", 413: "413 Content Too Large"}


class WsgiBodyLimit:
    """The same limit for the WSGI entry point.

    A declared length above the limit is refused unread. A body without a length is read (up
    to the limit) only when the server marks ``wsgi.input`` as terminated (gunicorn does, for
    chunked requests); otherwise Django sees no body, as WSGI defines, and nothing is read.
    (``Connection`` is the server's to set under WSGI: a hop-by-hop header is not the app's.)
    """

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        limit = request_limit()
        request_id = accepted_request_id(environ.get("HTTP_X_REQUEST_ID"))
        raw = environ.get("CONTENT_LENGTH") or ""
        try:
            declared = declared_length([raw] if raw.strip() else [])
        except MalformedLength as exc:
            return _wsgi_respond(start_response, 400, _malformed_body(str(exc)), request_id)
        details: dict[str, Any] | None = None
        if declared is not None and declared > limit:
            details = {"content_length": declared}
        elif declared is None and environ.get("wsgi.input_terminated"):
            stream = environ["wsgi.input"]
            parts: list[bytes] = []
            size = 0
            while size <= limit:
                block = stream.read(min(_WSGI_BLOCK, limit + 1 - size))
                if not block:
                    break
                parts.append(block)
                size += len(block)
            if size > limit:
                details = {"received_bytes": size}
            else:
                body = b"".join(parts)
                environ["wsgi.input"] = io.BytesIO(body)
                environ["CONTENT_LENGTH"] = str(len(body))
        if details is None:
            return self.app(environ, start_response)
        method = str(environ.get("REQUEST_METHOD", "")).upper()
        path = str(environ.get("PATH_INFO", ""))
        close_old_connections()
        try:
            record_too_large(
                method=method, path=path, request_id=request_id, limit=limit, details=details
            )
        finally:
            close_old_connections()
        note = (
            f"of {details['content_length']} bytes"
            if "content_length" in details
            else "without Content-Length"
        )
        _observe(method, started)
        return _wsgi_respond(start_response, 413, _too_large_body(limit, note), request_id)


def _wsgi_respond(
    start_response: StartResponse, status: int, body: bytes, request_id: str
) -> list[bytes]:
    start_response(
        _REASONS[status],
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("X-Content-Type-Options", "nosniff"),
            ("Cache-Control", "no-store"),
            ("X-Request-ID", request_id),
        ],
    )
    return [body]
