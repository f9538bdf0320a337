"""API authentication: bearer tokens for clients, the console's session cookie for browsers.

A token a process has validated is remembered for ``OPENRATH_TOKEN_CACHE_SECONDS`` (default 5)
with its principal, keyed by the SHA-256 of the raw bearer string: a request within that window
costs no token or project query (two of a simple write's round trips). The bound is the
contract: a token revoked (or a project taken from it) is refused by every process within that
many seconds; an expired one at once (the expiry is checked on every request). ``0`` turns the
cache off, so revocation is refused on the very next request.
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from openrath_project.jsonlog import set_log_context
from openrath_project.tenancy.models import ApiToken
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.services import (
    TokenRejected,
    principal_for_token,
    token_authenticate,
)
from openrath_project.tenancy.token_cache import TokenCache, token_cache

__all__ = ["TokenCache", "principal_for_bearer", "token_cache"]


def _own_copy(principal: Principal) -> Principal:
    """The cached principal with model instances of the request's own (a handler that caches
    a relation on them must not share it with concurrent requests)."""
    token = copy.copy(principal.token)
    tenant = copy.copy(principal.tenant)
    if token is not None:
        token.tenant = tenant
    return replace(principal, tenant=tenant, token=token)


def principal_for_bearer(raw: str) -> Principal:
    """The principal of a raw bearer token: from the cache within its bound, else checked in
    the database (and remembered). :class:`TokenRejected` says why a token is refused."""
    ttl = float(settings.OPENRATH_TOKEN_CACHE_SECONDS)
    raw = raw.strip()
    if ttl <= 0:
        token = token_authenticate(raw)
        return principal_for_token(token)
    digest = hashlib.sha256(raw.encode()).digest()
    cached = token_cache.get(digest, ttl, time.monotonic())
    if cached is not None:
        expires_at = cached.token.expires_at if cached.token is not None else None
        if expires_at is None or expires_at > timezone.now():
            return _own_copy(cached)
        token_cache.discard(digest)  # expired: the database check below says so
    checked_at = time.monotonic()
    token = token_authenticate(raw)
    principal = principal_for_token(token)
    token_cache.put(digest, principal, checked_at)
    return _own_copy(principal)


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
            principal = principal_for_bearer(raw)
        except TokenRejected as exc:
            # Lets the audit middleware attribute a denial to the token's tenant.
            request._request.audit_token = exc.token  # type: ignore[attr-defined]
            raise exceptions.AuthenticationFailed(exc.message) from exc
        token = principal.token
        assert token is not None  # a token's principal carries it
        request._request.audit_token = token  # type: ignore[attr-defined]
        # resolve_principal (openrath_project.api.permissions) takes it from here.
        request._request.principal = principal  # type: ignore[attr-defined]
        set_log_context(tenant=principal.tenant_id)
        return TokenUser(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="openrath"'


class ConsoleSessionAuthentication(authentication.SessionAuthentication):
    """The console's login cookie, with Django's CSRF protection on unsafe methods."""
