"""API authentication: bearer tokens for clients, the console's session cookie for browsers."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from openrath_project.tenancy.models import ApiToken
from openrath_project.tenancy.services import TokenRejected, token_authenticate


class TokenUser:
    """The ``request.user`` of a token-authenticated request: a token is not a Django user."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, token: ApiToken) -> None:
        self.token = token

    def get_username(self) -> str:
        return f"token:{self.token.prefix}"

    def __str__(self) -> str:
        return self.get_username()


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer ort_<prefix>_<secret>``."""

    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword:
            return None
        try:
            token = token_authenticate(raw)
        except TokenRejected as exc:
            # Lets the audit middleware attribute a denial to the token's tenant.
            request._request.audit_token = exc.token  # type: ignore[attr-defined]
            raise exceptions.AuthenticationFailed(exc.message) from exc
        request._request.audit_token = token  # type: ignore[attr-defined]
        return TokenUser(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="openrath"'


class ConsoleSessionAuthentication(authentication.SessionAuthentication):
    """The console's login cookie, with Django's CSRF protection on unsafe methods."""
