"""Streaming responses served asynchronously under ASGI.

WhiteNoise answers static files (the console's assets) with a ``FileResponse`` whose iterator
is synchronous; Django's ASGI handler then warns on every such response ("StreamingHttpResponse
must consume synchronous iterators in order to serve them asynchronously") and consumes the
whole iterator in a thread before sending a byte. This middleware gives an ASGI request's
synchronous streaming response an asynchronous iterator that reads each block in a worker thread,
so the file is sent block by block and nothing warns. WSGI requests are left as they are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

_DONE = object()


def _next_block(iterator: Iterator[Any]) -> Any:
    return next(iterator, _DONE)


async def _blocks(iterator: Iterator[Any]) -> AsyncIterator[Any]:
    read = sync_to_async(_next_block, thread_sensitive=False)
    while True:
        block = await read(iterator)
        if block is _DONE:
            return
        yield block


def asynchronous(response: StreamingHttpResponse) -> StreamingHttpResponse:
    """Make ``response`` stream through an asynchronous iterator (closers are kept)."""
    if response.is_async:
        return response
    iterator: Iterator[Any] = iter(response.streaming_content)  # type: ignore[arg-type]
    response.streaming_content = _blocks(iterator)
    return response


class AsyncStreamingMiddleware:
    """Serve ASGI requests' synchronous streaming responses through an async iterator."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if isinstance(request, ASGIRequest) and isinstance(response, StreamingHttpResponse):
            return asynchronous(response)
        return response
