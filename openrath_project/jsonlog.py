"""Structured logs: every record carries the request id, tenant, run and step of its context.

The context lives in :mod:`contextvars`, so it follows a request through sync and async code
and a step through the worker. ``log_context(...)`` sets values for a block.

Query strings can carry credentials (``?token=...``, a presigned URL's ``X-Amz-Signature``): the
value of every query parameter whose name looks like one (:func:`sensitive_param`) is replaced
by ``[redacted]`` in the arguments of every record that passes :class:`ContextFilter` (the
product's handler) or :class:`RedactQueryStrings` (installed on the ASGI/WSGI servers' own
access and error loggers by :func:`install_log_redaction`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_plus

from opentelemetry import trace

CONTEXT_FIELDS = ("request_id", "tenant", "project", "run", "step", "worker")
#: The current span's ids (hex, as tracing backends show them), when a span is recording.
TRACE_FIELDS = ("trace_id", "span_id")

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


#: Words that make a query parameter's value a secret when its name contains one.
SENSITIVE_PARAM_WORDS = (
    "token",
    "key",
    "password",
    "passwd",
    "secret",
    "signature",
    "credential",
    "auth",
    "sessionid",
)
REDACTED = "[redacted]"
# ``name=value`` after ``?``, ``&`` or ``;`` (a URL's query string), up to the next separator.
_QUERY_PARAM_RE = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;#?\s\"'<>]+)=(?P<value>[^&;#\s\"'<>]*)")
#: Loggers of the web servers that write request lines themselves (path and query string).
SERVER_LOGGERS = (
    "uvicorn.access",
    "uvicorn.error",
    "gunicorn.access",
    "gunicorn.error",
    "django.server",
)


def sensitive_param(name: str) -> bool:
    """Whether a query parameter of this name may carry a credential."""
    folded = unquote_plus(name).lower()
    return any(word in folded for word in SENSITIVE_PARAM_WORDS)


def redact_query_strings(text: str) -> str:
    """``text`` with the value of every credential-like query parameter replaced."""
    if "=" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        if not match.group("value") or not sensitive_param(match.group("name")):
            return match.group(0)
        return f"{match.group('lead')}{match.group('name')}={REDACTED}"

    return _QUERY_PARAM_RE.sub(replace, text)


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact_query_strings(value)
    if isinstance(value, bytes):
        return redact_query_strings(value.decode("latin-1"))
    return value


def redact_record(record: logging.LogRecord) -> None:
    """Redact query strings in a record's message and arguments (in place)."""
    if isinstance(record.msg, str):
        record.msg = redact_query_strings(record.msg)
    args = record.args
    if isinstance(args, tuple):
        record.args = tuple(_redacted(arg) for arg in args)
    elif isinstance(args, dict):
        record.args = {key: _redacted(value) for key, value in args.items()}


class RedactQueryStrings(logging.Filter):
    """Logger filter: credential-like query parameters never reach any handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def install_log_redaction() -> None:
    """Put :class:`RedactQueryStrings` on the servers' own loggers (once per logger); their
    handlers are the servers' own, so the product's handler filter never sees those lines."""
    for name in SERVER_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(f, RedactQueryStrings) for f in target.filters):
            target.addFilter(RedactQueryStrings())


class ContextFilter(logging.Filter):
    """Copies the context onto the record, so any formatter can use it, and redacts
    credential-like query parameters (:func:`redact_record`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
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
        if not hasattr(record, "trace_id"):
            span = trace.get_current_span().get_span_context()
            record.trace_id = format(span.trace_id, "032x") if span.is_valid else "-"
            record.span_id = format(span.span_id, "016x") if span.is_valid else "-"
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
        for name in CONTEXT_FIELDS + TRACE_FIELDS:
            value = getattr(record, name, "-")
            if value != "-":
                payload[name] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)
