"""Request id, body size limit and the audit trail of every mutating or denied request."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from openrath_project.api.audit import audit_info
from openrath_project.errors import error_body
from openrath_project.jsonlog import reset_log_context, set_log_context

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

Handler = Callable[[HttpRequest], HttpResponse]


class RequestIdMiddleware:
    """Accept a well-formed ``X-Request-ID`` or make one; echo it; put it in the log context."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = incoming if _REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex
        request.request_id = request_id  # type: ignore[attr-defined]
        token = set_log_context(request_id=request_id)
        try:
            response = self.get_response(request)
        finally:
            reset_log_context(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


def is_api_path(path: str) -> bool:
    return path.startswith("/api/")


class BodySizeLimitMiddleware:
    """413 for a declared ``Content-Length`` above ``OPENRATH_MAX_REQUEST_BYTES``.

    The servers' entry points enforce the limit while the body arrives, before Django reads it
    (:mod:`openrath_project.bodylimit`, which writes the same audit event); this second check
    covers Django's own handlers (the test client, ``runserver`` behind another WSGI wrapper).
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        raw_length = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw_length)
        except ValueError:
            return JsonResponse(
                error_body("malformed_request", "invalid Content-Length header"), status=400
            )
        limit = int(settings.OPENRATH_MAX_REQUEST_BYTES)
        if length > limit:
            body = error_body(
                "payload_too_large",
                f"request body of {length} bytes exceeds the limit of {limit} bytes",
                {"limit_bytes": limit},
            )
            request.audit_info = {  # type: ignore[attr-defined]
                "action": "request.too_large",
                "details": {"content_length": length},
            }
            return JsonResponse(body, status=413)
        return self.get_response(request)


AUDITED_PREFIXES = ("/api/", "/console/")


def _audited_path(path: str) -> bool:
    admin = "/" + str(settings.ADMIN_PATH)
    return path.startswith(AUDITED_PREFIXES) or path.startswith(admin)


def _outcome(status: int) -> str:
    if status in (401, 403):
        return "denied"
    return "success" if status < 400 else "failure"


def _sent_to_admin_login(request: HttpRequest, response: HttpResponse) -> bool:
    """The admin refuses an anonymous or non-staff request with a redirect to its login page
    (not a 401/403): that is a denial, not a success."""
    if response.status_code not in (301, 302, 303) or not response.has_header("Location"):
        return False
    login = "/" + str(settings.ADMIN_PATH) + "login/"
    return urlsplit(response["Location"]).path == login and request.path != login


def _error_code(response: HttpResponse) -> str | None:
    data: Any = getattr(response, "data", None)
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        code = data["error"].get("code")
        return str(code) if code else None
    return None


class AuditMiddleware:
    """Writes one audit event per mutating or denied request, after the outcome is known."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        try:
            self._record(request, response)
        except Exception:  # an audit failure must be loud, but must not turn into a 500
            logger.exception(
                "could not write the audit event for %s %s", request.method, request.path
            )
        return response

    def _record(self, request: HttpRequest, response: HttpResponse) -> None:
        status = response.status_code
        mutating = request.method not in SAFE_METHODS
        denied = status in (401, 403) or _sent_to_admin_login(request, response)
        if not _audited_path(request.path) or not (mutating or denied):
            return
        if getattr(request, "audit_skip", False) and not denied:
            return
        from openrath_project.tenancy.services import audit_record

        note = audit_info(request)
        principal = getattr(request, "principal", None)
        token = getattr(request, "audit_token", None)
        user = getattr(request, "user", None)
        if principal is not None:
            actor, tenant = principal.actor, principal.tenant
        elif token is not None:
            actor, tenant = f"token:{token.prefix}", token.tenant
        elif user is not None and user.is_authenticated:
            actor, tenant = f"user:{user.get_username()}", None
        else:
            actor, tenant = "anonymous", None
        match = request.resolver_match
        default_action = (
            f"{match.url_name}.{(request.method or '').lower()}"
            if match is not None and match.url_name
            else f"{request.method} {request.path}"[:100]
        )
        details = dict(note.get("details") or {})
        details.update({"method": request.method, "path": request.path[:300]})
        code = _error_code(response)
        if code:
            details["error_code"] = code
        project = note.get("project")
        if code == "database_unavailable":
            # The request changed nothing, and writing its audit row would wait for the pool
            # again (doubling the client's wait): the JSON log line keeps the record instead.
            logger.warning(
                "audit event not written, the database is unavailable: %s by %s (%s %s, %s)",
                note.get("action") or default_action,
                actor,
                request.method,
                request.path[:300],
                status,
            )
            return
        audit_record(
            actor=actor,
            action=note.get("action") or default_action,
            outcome="denied" if denied else _outcome(status),
            tenant=tenant,
            project=project if project is not None and tenant is not None else None,
            object_type=note.get("object_type", ""),
            object_id=str(note.get("object_id", "")),
            status_code=status,
            request_id=getattr(request, "request_id", ""),
            details=details,
        )
