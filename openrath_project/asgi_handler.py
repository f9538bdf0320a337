"""Django's ASGI handler with one thread hop per request.

Django's own ``ASGIHandler`` loads the middleware for an asynchronous chain. Every view and
almost every middleware here is synchronous, so each request crossed between the event loop
and its thread at each boundary: into the first synchronous middleware, back to the loop for
the asynchronous inner handler, into the thread again for the view, and once more for each
adapted ``process_view`` (CSRF, axes) and for Django's async-capable mixins. This handler loads
the chain in synchronous mode, as under WSGI, and runs the whole of it (middleware, view,
response rendering) in one ``sync_to_async`` call on the request's own thread — the thread
Django's ``ThreadSensitiveContext`` gives each request, where ``request_started`` and
``response.close()`` (and so ``close_old_connections``, which returns the connection to the
pool) also run. Reading the body, sending the response and streaming (the SSE views' async
iterators, WhiteNoise's files through ``AsyncStreamingMiddleware``) stay on the event loop as
before. Measured with ``benchmarks/api_latency.py``.

That thread is lent, not made: Django's ``ASGIHandler`` enters a fresh ``ThreadSensitiveContext``
per request, whose executor starts a new thread for the request's first synchronous call and,
at the end, joins it from yet another new thread; under load the event loop waited in
``Thread.start`` for each new thread to be scheduled. Here each request's context gets an idle
single-thread executor from :class:`RequestThreads` (asgiref's caller-owned executor), which takes
it back when the request is over — unless a call of the request is still running on it (a
client that disconnected mid-view: Django stops awaiting, the view runs on), in which case that
executor finishes its work and its thread ends, as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

T = TypeVar("T")


class RequestExecutor(ThreadPoolExecutor):
    """One thread, running one request's synchronous calls; knows whether any is unfinished."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="openrath-request")
        self._unfinished = 0
        self._count = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._count:
            self._unfinished += 1
        future = super().submit(fn, *args, **kwargs)
        # Added before asyncio's own callback (run_in_executor adds it after submit returns):
        # by the time the loop resumes the awaiting coroutine the count is already down.
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future: Future[Any]) -> None:
        with self._count:
            self._unfinished -= 1

    @property
    def idle(self) -> bool:
        with self._count:
            return self._unfinished == 0


class RequestThreads:
    """Idle :class:`RequestExecutor` s, lent one per request (most recently returned first, so
    a quiet process keeps reusing the same few threads). At most ``keep`` stay idle; an extra one
    returned when that many are idle is shut down (its thread ends)."""

    def __init__(self, keep: int = 32) -> None:
        self.keep = keep
        self._idle: list[RequestExecutor] = []
        self._lock = threading.Lock()
        #: Executors made (a thread each, started on first use) and given back, for the tests.
        self.made = 0
        self.reused = 0

    def take(self) -> RequestExecutor:
        with self._lock:
            if self._idle:
                self.reused += 1
                return self._idle.pop()
            self.made += 1
        return RequestExecutor()

    def give_back(self, executor: RequestExecutor) -> None:
        if executor.idle:
            with self._lock:
                if len(self._idle) < self.keep:
                    self._idle.append(executor)
                    return
        # Still running an abandoned call, or enough are idle: its thread ends after its work.
        executor.shutdown(wait=False)


class OneHopASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose middleware chain and view run synchronously in one hop, on a
    thread lent by :class:`RequestThreads`."""

    def __init__(self) -> None:
        base.BaseHandler.__init__(self)  # not ASGIHandler.__init__: it loads an async chain
        self.load_middleware(is_async=False)
        self.threads = RequestThreads()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # get_response sets the urlconf, runs the chain, adds request.close to the closers and
        # logs 4xx/5xx: what get_response_async does, in the request's thread.
        response: HttpResponseBase = await sync_to_async(self.get_response, thread_sensitive=True)(
            request
        )
        return response


def outside_the_event_loop(fn: Callable[[], T]) -> T:
    """``fn()``, on a thread of its own when this thread runs an event loop.

    ``uvicorn --workers N`` (N > 1) imports the application inside each worker's running loop
    (with one worker it imports it before the loop starts), where Django refuses database work
    at import time (the production web gate's migration check): every worker died with
    ``SynchronousOnlyOperation``. A thread has no loop; the check keeps its own connection."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="openrath-import") as pool:
        return pool.submit(fn).result()


def get_one_hop_asgi_application() -> Any:
    """Set Django up and return the one-hop handler (``get_asgi_application``'s counterpart)."""
    django.setup(set_prefix=False)
    return OneHopASGIHandler()
