"""A real uvicorn server (in a thread of the test process, on the test database) and a small
Server-Sent Events reader, for the SSE tests and the remote client's tests."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import uvicorn

from benchmarks._common import free_ports
from openrath_project.asgi import application

#: The wait for something that must happen (generous: a loaded machine delays, never drops).
TIMEOUT = 60


@contextlib.contextmanager
def uvicorn_server() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` served by uvicorn running the ASGI application.

    In this process, so the server reads the test database and the in-memory channel layer's
    hints reach its streams. No lifespan: the tests drive runs themselves."""
    port = free_ports(1)[0]
    config = uvicorn.Config(
        application,
        host="127.0.0.1",
        port=port,
        lifespan="off",
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=TIMEOUT)


class CuttableProxy:
    """A TCP proxy in front of the server that the test can cut: :meth:`cut` drops every open
    connection (both ends see it, as when a network path dies); while :meth:`hold` is on, new
    connections are accepted but not passed on until :meth:`release` (a client reconnecting
    then waits, so what is written meanwhile is written while it is disconnected)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port))
        self.port = free_ports(1)[0]
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.accepted = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._gate = threading.Event()
        self._gate.set()
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._gate.wait()
        try:
            upstream = socket.create_connection(self.target, timeout=TIMEOUT)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open += [client, upstream]
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def hold(self) -> None:
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def close(self) -> None:
        self.release()
        self.listener.close()
        self.cut()


@dataclass
class Event:
    event: str
    data: Any
    id: str | None


def events_of(response: httpx2.Response) -> Iterator[Event | str]:
    """The SSE events of a streamed response, in order; a comment line (``: keep-alive``)
    comes as its text."""
    fields: dict[str, str] = {}
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield Event(
                    fields.get("event", "message"), json.loads("\n".join(data)), fields.get("id")
                )
            fields, data = {}, []
            continue
        if line.startswith(":"):
            yield line
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        else:
            fields[name] = value


def read_until(
    stream: Iterator[Event | str], predicate: Any, *, keep_comments: bool = False
) -> list[Event | str]:
    """Everything up to and including the first event ``predicate`` accepts."""
    seen: list[Event | str] = []
    for item in stream:
        if isinstance(item, str) and not keep_comments:
            continue
        seen.append(item)
        if isinstance(item, Event) and predicate(item):
            return seen
    raise AssertionError(f"the stream ended first: {seen!r}")


def bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}
