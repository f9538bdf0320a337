"""Tenancy writes: tenants, projects, users and memberships, API tokens, audit events.

Every state change of this app goes through here; the API, the console, admin actions and the
management commands all call these functions.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
import string
import uuid
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connections, router, transaction
from django.db.models import Q
from django.utils import timezone

from openrath_project.errors import Conflict, NotAuthenticated, NotFound, ValidationFailed
from openrath_project.tenancy.grants import ROLES, UnknownGrant, grants_for_role, parse_grants
from openrath_project.tenancy.models import (
    ApiToken,
    AuditEvent,
    Membership,
    Project,
    Tenant,
)
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.token_cache import token_cache

SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
TOKEN_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
TOKEN_PREFIX_LENGTH = 10
TOKEN_RE = re.compile(r"^ort_([a-z0-9]{10})_([A-Za-z0-9_-]{20,200})$")
#: ``last_used_at`` is refreshed at most this often, so reads do not write on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _check_slug(slug: str, *, field: str = "slug") -> str:
    if not isinstance(slug, str) or not SLUG_RE.match(slug):
        raise ValidationFailed(
            f"{field} must be 1-63 lowercase letters, digits or '-' (not at either end)",
            details={field: ["invalid slug"]},
        )
    return slug


# --- Tenants and projects -------------------------------------------------------------------


def tenant_create(*, slug: str, name: str | None = None) -> Tenant:
    """Create a tenant; its slug is unique (409 otherwise)."""
    _check_slug(slug)
    try:
        with transaction.atomic():
            return Tenant.objects.create(slug=slug, name=name or slug)
    except IntegrityError as exc:
        raise Conflict(f"tenant {slug!r} already exists", details={"slug": slug}) from exc


def project_create(*, tenant: Tenant, slug: str, name: str | None = None) -> Project:
    """Create a project in a tenant; the slug is unique in the tenant (409 otherwise)."""
    _check_slug(slug)
    try:
        with transaction.atomic():
            return Project.objects.create(tenant=tenant, slug=slug, name=name or slug)
    except IntegrityError as exc:
        raise Conflict(
            f"project {slug!r} already exists in this tenant", details={"slug": slug}
        ) from exc


# --- Users and memberships --------------------------------------------------------------------


def user_join_tenant(
    *, tenant: Tenant, username: str, role: str, password: str | None = None
) -> tuple[AbstractBaseUser, bool]:
    """Create the user if needed (with ``password``) and give it ``role`` in ``tenant``.

    Returns ``(user, created)``. An existing member is a 409: roles change through
    :func:`membership_set_role`.
    """
    if role not in ROLES:
        raise ValidationFailed(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    user_model = get_user_model()
    with transaction.atomic():
        user = user_model.objects.filter(username=username).first()
        created = user is None
        if user is None:
            if not password:
                raise ValidationFailed("a password is required for a new user")
            user = user_model.objects.create_user(username=username, password=password)
        if Membership.objects.filter(user=user, tenant=tenant).exists():
            raise Conflict(f"user {username!r} is already a member of tenant {tenant.slug!r}")
        Membership.objects.create(user=user, tenant=tenant, role=role)
    return user, created


def membership_set_role(*, tenant: Tenant, username: str, role: str) -> Membership:
    if role not in ROLES:
        raise ValidationFailed(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    updated = Membership.objects.filter(tenant=tenant, user__username=username).update(role=role)
    if not updated:
        raise NotFound(f"user {username!r} is not a member of tenant {tenant.slug!r}")
    return Membership.objects.get(tenant=tenant, user__username=username)


def principal_for_user(user: Any, *, tenant_ref: str | None = None) -> Principal | None:
    """The principal of a console user in the given tenant (slug or id), or their first tenant."""
    memberships = Membership.objects.filter(user_id=user.pk).select_related("tenant")
    if tenant_ref:
        memberships = memberships.filter(
            Q(tenant__slug=tenant_ref) | _id_q("tenant__id", tenant_ref)
        )
    membership = memberships.order_by("tenant__slug").first()
    if membership is None:
        return None
    return Principal(
        tenant=membership.tenant,
        grants=grants_for_role(membership.role),
        project_ids=None,
        actor=f"user:{user.get_username()}",
        user=user,
        role=membership.role,
    )


def _id_q(field: str, value: str) -> Q:
    try:
        return Q(**{field: uuid.UUID(str(value))})
    except ValueError:
        return Q(pk__in=[])


# --- API tokens ---------------------------------------------------------------------------------


def _hash_token(raw: str) -> str:
    # The secret is 256 random bits: a fast hash is enough, there is nothing to brute-force.
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(
    *,
    tenant: Tenant,
    name: str,
    grants: Iterable[str],
    projects: Sequence[Project] = (),
    expires_in: timedelta | None = None,
    created_by: Any = None,
) -> tuple[ApiToken, str]:
    """Mint a token. Returns ``(token, raw)``; ``raw`` is shown once and never stored."""
    try:
        grant_set = parse_grants(grants)
    except UnknownGrant as exc:
        raise ValidationFailed(str(exc), details={"grants": [str(exc)]}) from exc
    if not grant_set:
        raise ValidationFailed("a token needs at least one grant", details={"grants": ["empty"]})
    for project in projects:
        if project.tenant_id != tenant.id:
            raise ValidationFailed(f"project {project.slug!r} is not in tenant {tenant.slug!r}")
    if expires_in is not None and expires_in.total_seconds() <= 0:
        raise ValidationFailed("expiry must be in the future", details={"expires_in": ["<= 0"]})
    now = timezone.now()
    for _ in range(5):
        prefix = "".join(secrets.choice(TOKEN_PREFIX_ALPHABET) for _ in range(TOKEN_PREFIX_LENGTH))
        raw = f"ort_{prefix}_{secrets.token_urlsafe(32)}"
        try:
            with transaction.atomic():
                token = ApiToken.objects.create(
                    tenant=tenant,
                    name=name or prefix,
                    prefix=prefix,
                    secret_hash=_hash_token(raw),
                    grants=sorted(grant_set),
                    created_by=created_by,
                    created_at=now,
                    expires_at=now + expires_in if expires_in is not None else None,
                )
                if projects:
                    token.projects.set(projects)
            return token, raw
        except IntegrityError:  # prefix collision: astronomically rare, try another
            continue
    raise Conflict("could not allocate a unique token prefix")


def token_revoke(*, prefix: str) -> ApiToken:
    """Revoke a token by its public prefix (idempotent: the first revocation time is kept)."""
    prefix = prefix.removeprefix("ort_").split("_", 1)[0]
    ApiToken.objects.filter(prefix=prefix, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    # This process refuses it on its next request (the cache is keyed by the raw token, which
    # is not known here, so all of it goes); again after commit, in case a request cached the
    # token between the update and the commit. Other processes: within the cache's bound.
    token_cache.clear()
    transaction.on_commit(token_cache.clear)
    token = ApiToken.objects.filter(prefix=prefix).select_related("tenant").first()
    if token is None:
        raise NotFound(f"no token with prefix {prefix!r}")
    return token


class TokenRejected(NotAuthenticated):
    """A bearer token that is malformed, unknown, expired or revoked; ``token`` when known."""

    def __init__(self, message: str, *, token: ApiToken | None = None) -> None:
        super().__init__(message)
        self.token = token


def token_authenticate(raw: str) -> ApiToken:
    """The live token for a raw bearer string, or :class:`TokenRejected` saying why."""
    match = TOKEN_RE.match(raw.strip())
    if not match:
        raise TokenRejected("malformed bearer token")
    token = ApiToken.objects.select_related("tenant").filter(prefix=match.group(1)).first()
    if token is None or not hmac.compare_digest(token.secret_hash, _hash_token(raw.strip())):
        raise TokenRejected("invalid bearer token")
    now = timezone.now()
    if token.revoked_at is not None:
        raise TokenRejected("token revoked", token=token)
    if token.expires_at is not None and token.expires_at <= now:
        raise TokenRejected("token expired", token=token)
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def principal_for_token(token: ApiToken) -> Principal:
    project_ids = frozenset(token.projects.values_list("id", flat=True))
    return Principal(
        tenant=token.tenant,
        grants=frozenset(token.grants),
        project_ids=project_ids or None,
        actor=f"token:{token.prefix}",
        token=token,
    )


# --- Audit --------------------------------------------------------------------------------------


def audit_record(
    *,
    actor: str,
    action: str,
    outcome: str,
    tenant: Tenant | None = None,
    project: Project | None = None,
    object_type: str = "",
    object_id: str = "",
    status_code: int | None = None,
    request_id: str = "",
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit event. Call it after the outcome is known, never before.

    On PostgreSQL its commit is synchronous whatever the session's ``synchronous_commit``:
    the web process commits everything else without waiting for the WAL flush (settings,
    ``DATABASE_ASYNC_COMMIT``), and WAL is flushed in order, so this flush makes the request's
    own earlier commits durable too before the response leaves: a write pays one flush, not
    two (its transaction's and its audit row's)."""
    if outcome not in AuditEvent.OUTCOMES:
        raise ValueError(f"unknown audit outcome {outcome!r}")
    event = AuditEvent(
        actor=actor[:200],
        action=action[:100],
        outcome=outcome,
        tenant=tenant,
        project=project,
        object_type=object_type[:50],
        object_id=str(object_id)[:100],
        status_code=status_code,
        request_id=request_id[:128],
        details=details or {},
    )
    connection = connections[router.db_for_write(AuditEvent)]
    if connection.vendor == "postgresql":
        _insert_synchronously(event, connection)
    else:
        event.save(force_insert=True)
    return event


def _audit_columns() -> tuple[list[Any], list[Any]]:
    """The columns :func:`_insert_synchronously` writes (every concrete one but the id and those
    the database fills, ``created_at``) and those it reads back (the id and those)."""
    fields = AuditEvent._meta.concrete_fields
    filled = [field for field in fields if field.primary_key or field.has_db_default()]
    return [field for field in fields if field not in filled], filled


@functools.cache
def _audit_insert_sql() -> str:
    """One statement for the row and the synchronous commit of its transaction.

    The ``set_config`` is a scalar subquery of the RETURNING list: evaluated once for the one
    row, before the transaction (the implicit one, or the caller's) commits. A single statement,
    so it binds on either side (``server_side_binding`` or not); ``VALUES`` gives each value its
    column's type, NULLs included."""
    quote = connections[router.db_for_write(AuditEvent)].ops.quote_name
    written, filled = _audit_columns()
    columns = ", ".join(quote(str(field.column)) for field in written)
    values = ", ".join(["%s"] * len(written))
    returned = ", ".join(quote(str(field.column)) for field in filled)
    table = quote(AuditEvent._meta.db_table)
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({values})"  # noqa: S608 - names from metadata
        f" RETURNING {returned}, (SELECT set_config('synchronous_commit', 'on', true))"
    )


def _insert_synchronously(event: AuditEvent, connection: Any) -> None:
    """Insert ``event`` with ``synchronous_commit`` on for its transaction, at no extra round
    trip and without the ORM's per-call compilation (the audit row ends every write request:
    about a tenth of a run POST's CPU went to ``Model.save`` building this INSERT). Values are
    prepared as the ORM prepares them for an insert; the columns the database fills come back."""
    written, filled = _audit_columns()
    params = [
        field.get_db_prep_save(field.pre_save(event, add=True), connection) for field in written
    ]
    with connection.cursor() as cursor:
        cursor.execute(_audit_insert_sql(), params)
        row = cursor.fetchone()
    for field, value in zip(filled, row, strict=False):  # the last column is the set_config
        setattr(event, field.attname, value)
    event._state.adding = False
    event._state.db = connection.alias


def login_failure_record(
    *, username: str, via: str, locked_out: bool, request_id: str = ""
) -> list[AuditEvent]:
    """Audit a failed console/admin login in each tenant ``username`` is a member of (none for
    a username that names no member: nothing tells a tenant it exists)."""
    user_model = get_user_model()
    memberships = Membership.objects.filter(
        **{f"user__{user_model.USERNAME_FIELD}": username[:150]}
    ).select_related("tenant")
    return [
        audit_record(
            actor="anonymous",
            action="login.failed",
            outcome="denied",
            tenant=membership.tenant,
            object_type="user",
            object_id=str(membership.user_id),
            status_code=429 if locked_out else 401,
            request_id=request_id,
            details={"username": username[:150], "via": via, "locked_out": locked_out},
        )
        for membership in memberships.order_by("tenant_id")
    ]
