"""Who is on the other end of a WebSocket: an API token or a console login.

Credentials, in order (the first one present decides, like the HTTP API):

1. ``Authorization: Bearer ort_...`` on the handshake;
2. the subprotocol ``openrath.bearer.<token>`` (browsers cannot set headers on a WebSocket; they
   offer it next to ``openrath.v1``, the subprotocol the server selects);
3. the console's session cookie (the tenant chosen in the session, ``openrath_tenant``, or the
   user's first membership).

Tokens in the query string are never read: URLs end up in access logs.

:class:`StreamAuthMiddleware` stores the result in ``scope["openrath_identity"]``; the consumer
decides what a missing identity means (4401) and checks grants and scope itself.
:class:`BrowserOriginValidator` guards cookie logins against cross-site WebSocket hijacking.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from openrath_project.api.permissions import SESSION_TENANT_KEY
from openrath_project.tenancy.models import ApiToken, Tenant
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.services import (
    TokenRejected,
    principal_for_token,
    principal_for_user,
    token_authenticate,
)
from openrath_project.ws.db import db_call

SUBPROTOCOL = "openrath.v1"
BEARER_SUBPROTOCOL_PREFIX = "openrath.bearer."
IDENTITY_SCOPE_KEY = "openrath_identity"
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


@dataclass(frozen=True)
class Identity:
    """The outcome of authenticating a handshake. ``status`` is 0 when ``principal`` is set,
    otherwise 401 (no or bad credentials) or 403 (a login that is not a member of the tenant).
    ``actor`` and ``tenant`` attribute audit rows of denials; ``reason`` is for the audit only.
    """

    principal: Principal | None
    status: int
    reason: str
    actor: str
    tenant: Tenant | None
    request_id: str
    #: For the periodic re-check of a cookie login: the session must still exist.
    session_key: str | None = None


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def request_id_of(scope: dict[str, Any]) -> str:
    incoming = _header(scope, b"x-request-id") or ""
    return incoming if _REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex


def bearer_of(scope: dict[str, Any]) -> str | None:
    """The raw bearer token of the handshake (header first, then the subprotocol), or None.

    An ``Authorization`` header with another scheme is ignored (as the HTTP API does)."""
    header = _header(scope, b"authorization")
    if header:
        scheme, _, raw = header.partition(" ")
        if scheme.lower() == "bearer":
            return raw.strip()
    for protocol in scope.get("subprotocols") or ():
        if protocol.startswith(BEARER_SUBPROTOCOL_PREFIX):
            return protocol[len(BEARER_SUBPROTOCOL_PREFIX) :]
    return None


def _anonymous(request_id: str, reason: str, status: int = 401) -> Identity:
    return Identity(None, status, reason, "anonymous", None, request_id)


def identify(scope: dict[str, Any]) -> Identity:
    """Resolve the handshake's principal (sync: reads the database)."""
    request_id = request_id_of(scope)
    raw = bearer_of(scope)
    if raw is not None:
        try:
            token = token_authenticate(raw)
        except TokenRejected as exc:
            known = exc.token
            return Identity(
                None,
                401,
                exc.message,
                f"token:{known.prefix}" if known is not None else "anonymous",
                known.tenant if known is not None else None,
                request_id,
            )
        by_token = principal_for_token(token)
        return Identity(by_token, 0, "", by_token.actor, by_token.tenant, request_id)
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return _anonymous(request_id, "no credentials")
    session = scope.get("session")
    tenant_ref = _header(scope, b"x-openrath-tenant") or (
        session.get(SESSION_TENANT_KEY) if session is not None else None
    )
    principal = principal_for_user(user, tenant_ref=tenant_ref)
    actor = f"user:{user.get_username()}"
    if principal is None:
        return Identity(None, 403, "not a member of that tenant", actor, None, request_id)
    session_key = getattr(session, "session_key", None)
    return Identity(principal, 0, "", actor, principal.tenant, request_id, session_key)


def reidentify(identity: Identity) -> Identity:
    """The identity again, from the database (sync): a revoked or expired token, a deleted
    session (logout) or a deactivated user is a 401, a lost membership a 403."""
    principal = identity.principal
    assert principal is not None
    if principal.token is not None:
        token = ApiToken.objects.select_related("tenant").filter(pk=principal.token.pk).first()
        now = timezone.now()
        if token is None or token.revoked_at is not None:
            return _anonymous(identity.request_id, "token revoked")
        if token.expires_at is not None and token.expires_at <= now:
            return _anonymous(identity.request_id, "token expired")
        renewed = principal_for_token(token)
        return Identity(renewed, 0, "", renewed.actor, renewed.tenant, identity.request_id)
    if identity.session_key is not None:
        from importlib import import_module

        engine = import_module(settings.SESSION_ENGINE)
        if not engine.SessionStore().exists(identity.session_key):
            return _anonymous(identity.request_id, "logged out")
    user = (
        get_user_model().objects.filter(pk=principal.user.pk, is_active=True).first()
        if principal.user is not None
        else None
    )
    if user is None:
        return _anonymous(identity.request_id, "user inactive")
    fresh_user = principal_for_user(user, tenant_ref=str(principal.tenant_id))
    if fresh_user is None:
        return Identity(
            None, 403, "no longer a member", principal.actor, principal.tenant, identity.request_id
        )
    return Identity(
        fresh_user,
        0,
        "",
        fresh_user.actor,
        fresh_user.tenant,
        identity.request_id,
        identity.session_key,
    )


class _Identify:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        scope = dict(scope)
        scope[IDENTITY_SCOPE_KEY] = await db_call(identify)(scope)
        return await self.inner(scope, receive, send)


def StreamAuthMiddleware(inner: Any) -> Any:  # noqa: N802 - an ASGI middleware "class"
    """Cookie session and login (channels' auth stack), then the bearer token: the handshake's
    :class:`Identity` goes into ``scope["openrath_identity"]``."""
    return AuthMiddlewareStack(_Identify(inner))


class BrowserOriginValidator(OriginValidator):
    """``AllowedHostsOriginValidator`` for browsers, token-only for everything else.

    A browser always sends ``Origin`` on a WebSocket handshake: it must be one of
    ``ALLOWED_HOSTS`` (else the handshake is denied), which stops another site from opening a
    socket with the user's console cookie. A handshake without ``Origin`` is not from a browser
    (API clients, CLIs): it is let through with its cookies removed, so it can only authenticate
    with a bearer token, which another site cannot supply.
    """

    def __init__(self, application: Any) -> None:
        allowed = list(settings.ALLOWED_HOSTS)
        if settings.DEBUG and not allowed:
            allowed = ["localhost", "127.0.0.1", "[::1]"]
        super().__init__(application, allowed)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("BrowserOriginValidator only guards WebSocket connections")
        if _header(scope, b"origin") is None:
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"cookie"]
            return await self.application(dict(scope, headers=headers), receive, send)
        return await super().__call__(scope, receive, send)


__all__ = [
    "BEARER_SUBPROTOCOL_PREFIX",
    "IDENTITY_SCOPE_KEY",
    "SUBPROTOCOL",
    "BrowserOriginValidator",
    "Identity",
    "StreamAuthMiddleware",
    "bearer_of",
    "identify",
    "reidentify",
]
