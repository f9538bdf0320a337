"""Request-scoped audit notes: views say what they act on, the middleware records the outcome."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


def _django_request(request: Any) -> HttpRequest:
    return getattr(request, "_request", request)


def audit_note(request: Any, **fields: Any) -> None:
    """Merge ``fields`` (action, object_type, object_id, project, details) into the request's note.

    ``None`` values do not overwrite what an earlier note said.
    """
    raw = _django_request(request)
    note: dict[str, Any] = getattr(raw, "audit_info", None) or {}
    for key, value in fields.items():
        if value is None or value == "":
            continue
        if key == "details":
            note.setdefault("details", {}).update(value)
        else:
            note[key] = value
    raw.audit_info = note  # type: ignore[attr-defined]


def audit_info(request: HttpRequest) -> dict[str, Any]:
    return dict(getattr(request, "audit_info", None) or {})


def audit_skip(request: Any) -> None:
    """The request writes its own audit rows (e.g. one per item); the middleware skips it."""
    _django_request(request).audit_skip = True  # type: ignore[attr-defined]
