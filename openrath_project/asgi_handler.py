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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import django
from asgiref.sync import sync_to_async
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

T = TypeVar("T")


class OneHopASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose middleware chain and view run synchronously in one hop."""

    def __init__(self) -> None:
        base.BaseHandler.__init__(self)  # not ASGIHandler.__init__: it loads an async chain
        self.load_middleware(is_async=False)

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
