"""Fixtures for webhook tests: a receiver on 127.0.0.1 the test controls, and settings that
allow it (a loopback target is refused otherwise)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that records every request. ``mode``: ``ok`` (204),
    ``error`` (503), ``redirect`` (302 to ``/elsewhere``), ``hang`` (records the request, then
    answers only once ``release`` is set: the sender times out first). ``stop()`` takes it down
    (connections are refused), ``start()`` brings it back on the same port."""

    port: int = 0
    mode: str = "ok"
    requests: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def ids(self, path: str = "/hook") -> list[str]:
        with self._lock:
            return [r.webhook_id for r in self.requests if r.path == path]

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver.requests.append(Received(self.path, headers, body))
                mode = receiver.mode
                if mode == "hang":
                    receiver.release.wait(timeout=60)
                try:
                    if mode == "redirect" and self.path == "/hook":
                        self.send_response(302)
                        self.send_header("location", f"http://127.0.0.1:{receiver.port}/elsewhere")
                        self.send_header("content-length", "0")
                        self.end_headers()
                    elif mode == "error":
                        payload = b'{"detail": "receiver unavailable"}'
                        self.send_response(503)
                        self.send_header("content-length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                    else:
                        self.send_response(204)
                        self.end_headers()
                except OSError:
                    pass  # the sender gave up (hang mode)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    running.start()
    yield running
    running.release.set()
    running.stop()


@pytest.fixture
def webhook_settings(settings: Any) -> Any:
    """Loopback targets allowed, short timeouts and retry delays, no automatic disabling."""
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    settings.WEBHOOK_TIMEOUT_SECONDS = 2.0
    settings.WEBHOOK_RETRY_BASE_SECONDS = 10.0
    settings.WEBHOOK_RETRY_MAX_SECONDS = 600.0
    settings.WEBHOOK_MAX_ATTEMPTS = 10
    settings.WEBHOOK_DISABLE_AFTER_FAILURES = 1000
    settings.WEBHOOK_TICK_SECONDS = 60.0
    return settings
