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
:class:`BrowserOriginValidator` guards cookie logins against cross-site WebSocket hijacking with
Django's CSRF rules for ``Origin`` (:func:`origin_verified`: scheme, host and port).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http.request import validate_host
from django.utils import timezone
from django.utils.http import is_same_domain

from openrath_project.api.permissions import SESSION_TENANT_KEY
from openrath_project.bodylimit import accepted_request_id
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
    return accepted_request_id(_header(scope, b"x-request-id"))


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
    (logout) or expired session or a deactivated user is a 401, a lost membership a 403."""
    principal = identity.principal
    assert principal is not None
    if principal.token is not None:
        token = (
            ApiToken.objects.for_principal(principal)
            .select_related("tenant")
            .filter(pk=principal.token.pk)
            .first()
        )
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
        # load() is empty for a session past its expiry (SESSION_COOKIE_AGE): the login is over.
        if not engine.SessionStore(identity.session_key).load():
            return _anonymous(identity.request_id, "login expired")
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


def _allowed_hosts() -> list[str]:
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]  # as HttpRequest.get_host()
    return allowed


def _handshake_request(scope: dict[str, Any]) -> ASGIRequest:
    """The handshake as Django sees an HTTP request (``wss`` is ``https``), so ``get_host()``
    and ``is_secure()`` apply ``ALLOWED_HOSTS``, ``USE_X_FORWARDED_HOST`` and
    ``SECURE_PROXY_SSL_HEADER`` exactly as for the console's pages."""
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    http_scope = {**scope, "type": "http", "method": "GET", "scheme": scheme}
    return ASGIRequest(http_scope, io.BytesIO())


def _addressed_host(scope: dict[str, Any], request: ASGIRequest, origin: str) -> str | None:
    """The host (with its port, as the client wrote it) the handshake was sent to, if allowed.

    A handshake that names no host at all (no ``Host`` header, no server address: in-process
    ASGI harnesses only, a network server always passes ``Host``) is taken as addressed to the
    default port of the origin's host, when that host is allowed."""
    named = (
        _header(scope, b"host") is not None
        or scope.get("server")
        or (settings.USE_X_FORWARDED_HOST and _header(scope, b"x-forwarded-host") is not None)
    )
    if named:
        try:
            return request.get_host()
        except DisallowedHost:
            return None
    try:
        parsed = urlsplit(origin)
        port = parsed.port
    except ValueError:
        return None
    hostname = parsed.hostname or ""
    if port is not None or not hostname or not validate_host(hostname, _allowed_hosts()):
        return None
    return parsed.netloc


def origin_verified(scope: dict[str, Any]) -> bool:
    """Django's CSRF check of ``Origin`` (``CsrfViewMiddleware``), for a WebSocket handshake.

    The origin must be the handshake's own, ``http(s)://<Host>``: scheme, host *and port*, the
    host one of ``ALLOWED_HOSTS``, ``https`` when the handshake is secure (``wss``, or the
    proxy's ``SECURE_PROXY_SSL_HEADER``); or exactly one of ``CSRF_TRUSTED_ORIGINS``; or match
    one of its wildcard entries (``https://*.example.com``) in scheme, subdomain and port.
    ``Origin: null`` (sandboxed frames, ``file:`` pages) matches nothing."""
    origin = _header(scope, b"origin")
    if origin is None:
        return False
    request = _handshake_request(scope)
    host = _addressed_host(scope, request, origin)
    if host is not None and origin == f"{'https' if request.is_secure() else 'http'}://{host}":
        return True
    trusted = list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []))
    if origin in {entry for entry in trusted if "*" not in entry}:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    for entry in trusted:
        if "*" not in entry:
            continue
        pattern = urlsplit(entry)
        if pattern.scheme == parsed.scheme and is_same_domain(
            parsed.netloc, pattern.netloc[pattern.netloc.index("*") + 1 :]
        ):
            return True
    return False


class BrowserOriginValidator:
    """Browsers' handshakes must come from the site itself; everything else is token-only.

    A browser always sends ``Origin`` on a WebSocket handshake: it must pass
    :func:`origin_verified` (Django's CSRF origin rules, port included), else the handshake is
    denied, which stops another site, or another port of the same host, from opening a socket
    with the user's console cookie. A handshake without ``Origin`` is not from a browser (API
    clients, CLIs): it is let through with its cookies removed, so it can only authenticate
    with a bearer token, which another site cannot supply.
    """

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("BrowserOriginValidator only guards WebSocket connections")
        if _header(scope, b"origin") is None:
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"cookie"]
            return await self.application(dict(scope, headers=headers), receive, send)
        if not origin_verified(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


__all__ = [
    "BEARER_SUBPROTOCOL_PREFIX",
    "IDENTITY_SCOPE_KEY",
    "SUBPROTOCOL",
    "BrowserOriginValidator",
    "Identity",
    "StreamAuthMiddleware",
    "bearer_of",
    "identify",
    "origin_verified",
    "reidentify",
]
