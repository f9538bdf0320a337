"""The request body limit is enforced while the body arrives, at the ASGI and WSGI entry points.

Django's handlers read (and spool) the whole body before any middleware runs, and a chunked
body has no Content-Length for a middleware to check: these tests drive the real entry points
with streamed bodies and count how much of each body was read.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.signals import request_started

from openrath_project.asgi import application
from openrath_project.tenancy.models import AuditEvent, Project

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 10_000
CHUNK = b"x" * 1024


@pytest.fixture(autouse=True)
def _limit(settings: Any) -> None:
    settings.OPENRATH_MAX_REQUEST_BYTES = LIMIT


@pytest.fixture
def django_started() -> Iterator[list[Any]]:
    """Every ``request_started`` Django sends (it sends it once it has read the body)."""
    started: list[Any] = []

    def receiver(**kwargs: Any) -> None:
        started.append(kwargs)

    request_started.connect(receiver)
    try:
        yield started
    finally:
        request_started.disconnect(receiver)


def http_scope(
    method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost"), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


class Body:
    """A streamed request body: ``chunks`` messages, counting how many were asked for."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.received = 0
        self.disconnect = False

    async def __call__(self) -> dict[str, Any]:
        if self.received >= len(self.chunks):
            # Django listens for a disconnect after the body: wait like a real connection.
            while not self.disconnect:
                await _sleep()
            return {"type": "http.disconnect"}
        chunk = self.chunks[self.received]
        self.received += 1
        return {
            "type": "http.request",
            "body": chunk,
            "more_body": self.received < len(self.chunks),
        }


async def _sleep() -> None:
    import asyncio

    await asyncio.sleep(0.01)


def call(scope: dict[str, Any], body: Body) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            body.disconnect = True

    async def run() -> None:
        await application(scope, body, send)

    async_to_sync(run)()
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), dict(start["headers"]), content


def too_large(content: bytes) -> dict[str, Any]:
    body = json.loads(content)
    assert set(body) == {"error"}
    assert body["error"]["code"] == "payload_too_large"
    assert body["error"]["details"] == {"limit_bytes": LIMIT}
    return dict(body["error"])


def test_a_chunked_body_over_the_limit_is_refused_after_the_limit_not_read_to_the_end(
    make_token, django_started
):
    raw = make_token(["projects:write"])
    body = Body([CHUNK] * 1000)  # 1 MB in 1 KiB messages, no Content-Length
    scope = http_scope(
        "POST",
        "/api/v1/projects/",
        [
            (b"authorization", f"Bearer {raw}".encode()),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
            (b"x-request-id", b"chunked-over-1"),
        ],
    )
    status, headers, content = call(scope, body)
    assert status == 413
    too_large(content)
    # 10 messages of 1024 bytes are the first to pass 10,000 bytes: not one more was asked for.
    assert body.received == 10
    assert headers[b"connection"] == b"close"
    assert headers[b"x-request-id"] == b"chunked-over-1"
    assert headers[b"content-type"] == b"application/json"
    # Django never started the request: no session, no authentication, no view.
    assert django_started == []
    assert not Project.objects.exists()
    audit = AuditEvent.objects.get(request_id="chunked-over-1")
    assert (audit.action, audit.actor, audit.outcome, audit.status_code, audit.tenant_id) == (
        "request.too_large",
        "anonymous",
        "failure",
        413,
        None,
    )
    assert audit.details == {
        "received_bytes": 10 * 1024,
        "method": "POST",
        "path": "/api/v1/projects/",
    }


def test_a_declared_length_over_the_limit_is_refused_before_reading_a_byte(django_started):
    body = Body([CHUNK] * 1000)
    scope = http_scope(
        "POST",
        "/api/v1/sessions/import/",
        [(b"content-length", b"1024000"), (b"x-request-id", b"declared-over-1")],
    )
    status, headers, content = call(scope, body)
    assert status == 413
    error = too_large(content)
    assert error["message"] == "request body of 1024000 bytes exceeds the limit of 10000 bytes"
    assert body.received == 0
    assert headers[b"connection"] == b"close"
    assert django_started == []
    audit = AuditEvent.objects.get(request_id="declared-over-1")
    assert (audit.action, audit.outcome, audit.status_code) == ("request.too_large", "failure", 413)
    assert audit.details == {
        "content_length": 1024000,
        "method": "POST",
        "path": "/api/v1/sessions/import/",
    }


def test_a_chunked_body_within_the_limit_parses_like_any_other(make_token):
    """It used to reach DRF without a Content-Length and parse as an empty body."""
    raw = make_token(["projects:write"])
    payload = json.dumps({"slug": "streamed", "name": "Streamed in three parts"}).encode()
    parts = [payload[:10], payload[10:20], payload[20:]]
    scope = http_scope(
        "POST",
        "/api/v1/projects/",
        [
            (b"authorization", f"Bearer {raw}".encode()),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
    )
    status, _, content = call(scope, Body(parts))
    assert status == 201, content
    assert json.loads(content)["slug"] == "streamed"
    assert Project.objects.get(slug="streamed").name == "Streamed in three parts"


def test_a_body_at_the_limit_with_its_length_passes(make_token):
    raw = make_token(["projects:write"])
    payload = json.dumps({"slug": "exact", "name": "n" * 100}).encode()
    payload += b" " * (LIMIT - len(payload))  # exactly the limit: JSON allows trailing space
    scope = http_scope(
        "POST",
        "/api/v1/projects/",
        [
            (b"authorization", f"Bearer {raw}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ],
    )
    status, _, content = call(scope, Body([payload[:4000], payload[4000:]]))
    assert status == 201, content
    assert Project.objects.filter(slug="exact").exists()


@pytest.mark.parametrize("value", [b"abc", b"-1", b"10, 20"])
def test_a_malformed_content_length_is_400(value, django_started):
    body = Body([b"{}"])
    status, _, content = call(
        http_scope("POST", "/api/v1/projects/", [(b"content-length", value)]), body
    )
    assert status == 400
    assert json.loads(content)["error"]["code"] == "malformed_request"
    assert body.received == 0
    assert django_started == []
    assert not AuditEvent.objects.exists()


def test_a_safe_request_over_the_limit_is_refused_without_an_audit_row():
    """As the audit middleware does, only mutating requests (and denials) are audited."""
    body = Body([CHUNK] * 20)
    status, _, content = call(
        http_scope("GET", "/api/v1/projects/", [(b"x-request-id", b"get-over-1")]), body
    )
    assert status == 413
    too_large(content)
    assert body.received == 10
    assert not AuditEvent.objects.exists()


def test_a_client_that_disconnects_mid_body_gets_nothing_and_django_never_runs(django_started):
    sent: list[dict[str, Any]] = []
    messages = [
        {"type": "http.request", "body": CHUNK, "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        await application(http_scope("POST", "/api/v1/projects/"), receive, send)

    async_to_sync(run)()
    assert (sent, messages, django_started) == ([], [], [])


# --- WSGI -----------------------------------------------------------------------------------------


class Stream(io.BytesIO):
    """``wsgi.input`` that counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.consumed += len(data)
        return data


def wsgi_call(environ: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    from openrath_project.wsgi import application as wsgi_application

    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started.update(status=status, headers=dict(headers))

    content = b"".join(wsgi_application(environ, start_response))
    return started["status"], started["headers"], content


def wsgi_environ(stream: Stream, **extra: Any) -> dict[str, Any]:
    from wsgiref.util import setup_testing_defaults

    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/projects/",
        "CONTENT_TYPE": "application/json",
        "HTTP_HOST": "localhost",
        "wsgi.input": stream,
    }
    environ.update(extra)
    setup_testing_defaults(environ)
    return environ


def test_wsgi_refuses_a_declared_length_over_the_limit_unread():
    stream = Stream(CHUNK * 1000)
    status, headers, content = wsgi_call(
        wsgi_environ(stream, CONTENT_LENGTH="1024000", HTTP_X_REQUEST_ID="wsgi-over-1")
    )
    assert status.startswith("413 ")
    too_large(content)
    assert headers["X-Request-ID"] == "wsgi-over-1"
    assert stream.consumed == 0
    audit = AuditEvent.objects.get(request_id="wsgi-over-1")
    assert (audit.action, audit.details["content_length"]) == ("request.too_large", 1024000)


def test_wsgi_reads_a_terminated_body_without_length_only_up_to_the_limit(make_token):
    stream = Stream(CHUNK * 1000)
    status, _, content = wsgi_call(
        wsgi_environ(stream, **{"wsgi.input_terminated": True, "HTTP_X_REQUEST_ID": "wsgi-te-1"})
    )
    assert status.startswith("413 ")
    too_large(content)
    assert stream.consumed == LIMIT + 1
    assert AuditEvent.objects.get(request_id="wsgi-te-1").details["received_bytes"] == LIMIT + 1

    raw = make_token(["projects:write"])
    payload = json.dumps({"slug": "wsgi-chunked"}).encode()
    status, _, content = wsgi_call(
        wsgi_environ(
            Stream(payload),
            **{"wsgi.input_terminated": True, "HTTP_AUTHORIZATION": f"Bearer {raw}"},
        )
    )
    assert status.startswith("201 "), content
    assert Project.objects.filter(slug="wsgi-chunked").exists()


# --- A real server ------------------------------------------------------------------------------


def _read_response(sock: socket.socket, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length, read off the socket."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            raise AssertionError(f"connection closed before the response headers: {data!r}")
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    while len(rest) < length:
        more = sock.recv(65536)
        if not more:
            break
        rest += more
    return status, headers, rest[:length]


@pytest.mark.postgres
@pytest.mark.slow
def test_the_served_application_stops_reading_a_chunked_body_at_the_limit(
    transactional_db, tmp_path, make_token
):
    """``manage.py serve`` (uvicorn): a 256 MiB chunked upload is answered 413 and the server
    closes the connection instead of reading the rest; a huge declared length is answered
    without any body sent; a small chunked body works; the access log hides a token."""
    import http.client

    from tests.browser.conftest import Server
    from tests.support import require_postgres

    require_postgres()

    class LimitedServer(Server):
        def env(self) -> dict[str, str]:
            return {**super().env(), "OPENRATH_MAX_REQUEST_BYTES": "65536"}

    server = LimitedServer(tmp_path)
    server.start()
    try:
        # 1. Chunked, far over the limit: the sender is cut off long before the end.
        total = 256 * 1024 * 1024
        block = b"y" * 65536
        frame = f"{len(block):x}\r\n".encode() + block + b"\r\n"
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        sock.sendall(
            b"POST /api/v1/projects/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"X-Request-ID: served-chunked-1\r\n\r\n"
        )
        sent = {"bytes": 0, "error": None}

        def sender() -> None:
            try:
                while sent["bytes"] < total:
                    sock.sendall(frame)
                    sent["bytes"] += len(block)
                sock.sendall(b"0\r\n\r\n")
            except OSError as exc:
                sent["error"] = exc

        thread = threading.Thread(target=sender, daemon=True)
        thread.start()
        status, headers, content = _read_response(sock, timeout=60)
        thread.join(timeout=60)
        sock.close()
        assert status == 413
        assert json.loads(content)["error"] == {
            "code": "payload_too_large",
            "message": "request body without Content-Length exceeds the limit of 65536 bytes",
            "details": {"limit_bytes": 65536},
        }
        assert headers["connection"] == "close"
        assert not thread.is_alive(), "the server kept reading the body"
        assert sent["error"] is not None, "the whole body was accepted"
        # Kernel socket buffers hold some megabytes; the server itself read about 64 KiB.
        assert sent["bytes"] < 64 * 1024 * 1024, sent["bytes"]
        audit = AuditEvent.objects.get(request_id="served-chunked-1")
        assert (audit.action, audit.outcome, audit.status_code) == (
            "request.too_large",
            "failure",
            413,
        )
        assert audit.details["received_bytes"] > 65536

        # 2. A declared length over the limit: answered before one body byte is sent.
        started = time.monotonic()
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        sock.sendall(
            b"POST /api/v1/sessions/import/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: 10000000000\r\nExpect: 100-continue\r\n\r\n"
        )
        status, headers, content = _read_response(sock, timeout=60)
        sock.close()
        assert status == 413
        assert json.loads(content)["error"]["details"] == {"limit_bytes": 65536}
        assert time.monotonic() - started < 60

        # 3. A small chunked body within the limit is parsed (http.client frames it).
        raw = make_token(["projects:write"])
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        parts = iter([b'{"slug": "ser', b'ved", "name": "Over ', b'the wire"}'])
        connection.request(
            "POST",
            "/api/v1/projects/",
            body=parts,
            headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
            encode_chunked=True,
        )
        response = connection.getresponse()
        assert response.status == 201, response.read()
        response.read()

        # 4. The access log never shows a credential from a query string.
        connection.request("GET", "/healthz?token=leaked-canary-42&after=3")
        assert connection.getresponse().status == 200
        connection.close()
        assert Project.objects.get(slug="served").name == "Over the wire"
        deadline = time.monotonic() + 30
        while "/healthz?token=" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        log = server.log()
        assert "/healthz?token=[redacted]&after=3" in log
        assert "leaked-canary-42" not in log
    finally:
        server.stop()
