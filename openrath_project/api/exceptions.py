"""Maps every error to the documented body ``{"error": {"code", "message", "details"}}``.

This is the one place where exceptions become HTTP responses for the API.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.response import Response

from openrath_project.errors import DomainError, RateLimited, error_body

logger = logging.getLogger(__name__)

_DRF_CODES: dict[type[drf.APIException], str] = {
    drf.ParseError: "malformed_request",
    drf.AuthenticationFailed: "not_authenticated",
    drf.NotAuthenticated: "not_authenticated",
    drf.PermissionDenied: "permission_denied",
    drf.NotFound: "not_found",
    drf.MethodNotAllowed: "method_not_allowed",
    drf.NotAcceptable: "not_acceptable",
    drf.UnsupportedMediaType: "unsupported_media_type",
    drf.Throttled: "rate_limited",
}


def _flatten(detail: Any) -> Any:
    """DRF's ErrorDetail trees as plain JSON (strings, lists, dicts)."""
    if isinstance(detail, dict):
        return {str(k): _flatten(v) for k, v in detail.items()}
    if isinstance(detail, list):
        return [_flatten(v) for v in detail]
    return str(detail)


def _validation_message(details: Any) -> str:
    if isinstance(details, dict) and details:
        fields = ", ".join(sorted(details))
        first_field = sorted(details)[0]
        first = details[first_field]
        while isinstance(first, list | dict) and first:
            first = first[0] if isinstance(first, list) else next(iter(first.values()))
        return f"invalid input in field(s) {fields}: {first_field}: {first}"
    if isinstance(details, list) and details:
        return f"invalid input: {details[0]}"
    return "invalid input"


def response_for(exc: Exception) -> Response | None:
    """The error response for an exception, or ``None`` when it is not ours to map (a 500)."""
    headers: dict[str, str] = {}
    if isinstance(exc, DomainError):
        if isinstance(exc, RateLimited):
            headers["Retry-After"] = str(exc.retry_after)
        return Response(exc.as_body(), status=exc.status_code, headers=headers)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("payload_too_large", "request body too large"),
            status=413,
        )
    if isinstance(exc, OperationalError):
        # The database refused or dropped the connection, the pool had none free in time, or a
        # transaction lost a serialization race: nothing was changed, and a retry may succeed.
        logger.warning("database unavailable: %s", exc)
        return Response(
            error_body("database_unavailable", "the database is unavailable; retry shortly"),
            status=503,
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "not found"), status=404)
    if isinstance(exc, DjangoPermissionDenied):
        return Response(error_body("permission_denied", str(exc) or "permission denied"), 403)
    if isinstance(exc, drf.ValidationError):
        details = _flatten(exc.detail)
        if not isinstance(details, dict):
            details = {"non_field_errors": details if isinstance(details, list) else [details]}
        return Response(error_body("invalid", _validation_message(details), details), 400)
    if isinstance(exc, drf.APIException):
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        wait = getattr(exc, "wait", None)
        if isinstance(exc, drf.Throttled) and wait is not None:
            headers["Retry-After"] = str(max(1, int(wait + 0.999)))
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
        message = _flatten(exc.detail)
        if not isinstance(message, str):
            message = str(message)
        return Response(error_body(code, message), status=exc.status_code, headers=headers)
    return None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = response_for(exc)
    if response is not None and response.status_code == 401 and "request" in context:
        view = context.get("view")
        request = context["request"]
        if view is not None and "WWW-Authenticate" not in response:
            header = view.get_authenticate_header(request)
            if header:
                response["WWW-Authenticate"] = header
    return response
