"""Structured logs: every record carries the request id, tenant, run and step of its context.

The context lives in :mod:`contextvars`, so it follows a request through sync and async code
and a step through the worker. ``log_context(...)`` sets values for a block.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = ("request_id", "tenant", "project", "run", "step", "worker")

_context: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar(
    "openrath_log_context",
    default={},  # noqa: B039 - never mutated, always replaced
)


def current_context() -> dict[str, str]:
    return _context.get()


@contextmanager
def log_context(**values: Any) -> Iterator[None]:
    """Add values to the log context for the duration of the block."""
    merged = dict(_context.get())
    merged.update({k: str(v) for k, v in values.items() if v is not None})
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


def set_log_context(**values: Any) -> contextvars.Token[dict[str, str]]:
    merged = dict(_context.get())
    merged.update({k: str(v) for k, v in values.items() if v is not None})
    return _context.set(merged)


def reset_log_context(token: contextvars.Token[dict[str, str]]) -> None:
    _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the context onto the record, so any formatter can use it."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get()
        request = getattr(record, "request", None)  # django.request logs after the middleware
        if "request_id" not in ctx and getattr(request, "request_id", None):
            ctx = {**ctx, "request_id": request.request_id}  # type: ignore[union-attr]
        principal = getattr(request, "principal", None)  # logged after the context was reset
        if "tenant" not in ctx and principal is not None:
            ctx = {**ctx, "tenant": str(principal.tenant_id)}
        for name in CONTEXT_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, ctx.get(name, "-"))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, "-")
            if value != "-":
                payload[name] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)
