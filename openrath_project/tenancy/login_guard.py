"""Console and admin logins: failed attempts audited under the user's tenants, the lockout page.

Throttling itself is django-axes (``AxesStandaloneBackend`` first in
``AUTHENTICATION_BACKENDS``, ``AxesMiddleware``; settings in ``settings.py`` and
``docs/operations.md``): after ``OPENRATH_LOGIN_FAILURE_LIMIT`` failures an account is locked
for ``OPENRATH_LOGIN_LOCKOUT_MINUTES``, even for the right password. The console and the admin
share Django's ``authenticate``, so both are covered by one configuration.

Django announces a failed login with its ``user_login_failed`` signal (django-axes counts with
it too); :func:`login_failed` turns it into one audit row in each tenant the named user belongs
to, so each tenant's ``GET /api/v1/audit/`` shows attempts on its members' accounts. A username
that names no member writes no tenant row (the request's own, tenant-less row remains).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from openrath_project.tenancy.services import login_failure_record

#: The status of a locked-out login attempt.
LOCKED_OUT_STATUS = 429


def _via(request: HttpRequest | None) -> str:
    if request is None:
        return "other"
    return "admin" if request.path.startswith("/" + str(settings.ADMIN_PATH)) else "console"


def login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """``user_login_failed`` receiver: audit the attempt under the user's tenants."""
    username = credentials.get("username")
    if not isinstance(username, str) or not username:
        return
    login_failure_record(
        username=username,
        via=_via(request),
        locked_out=bool(getattr(request, "axes_locked_out", False)),
        request_id=str(getattr(request, "request_id", "")),
    )


def connect() -> None:
    user_login_failed.connect(login_failed, dispatch_uid="openrath-login-failed-audit")


def _cool_off() -> timedelta:
    cool_off = settings.AXES_COOLOFF_TIME
    return cool_off if isinstance(cool_off, timedelta) else timedelta(hours=float(cool_off or 0))


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: a clear page (429, ``Retry-After``) instead of the form."""
    seconds = int(_cool_off().total_seconds())
    minutes = max(1, round(seconds / 60))
    response = render(
        request,
        "console/error.html",
        {
            "status": LOCKED_OUT_STATUS,
            "title": "Too many failed logins",
            "message": (
                "This account is locked after too many failed logins. "
                f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
            ),
            "login": True,
        },
        status=LOCKED_OUT_STATUS,
    )
    if seconds > 0:
        response["Retry-After"] = str(seconds)
    return response
