"""Tenancy: tenants, projects, memberships, scoped API tokens and the append-only audit log."""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from openrath_project.ids import uuid7
from openrath_project.tenancy.grants import ROLES
from openrath_project.tenancy.scoping import TENANT_WIDE, ScopedManager, ScopedQuerySet


class Tenant(models.Model):
    """An isolated customer: everything else belongs to exactly one tenant."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    #: At most this many of the tenant's runs execute at once (``None``: no limit); set by an
    #: operator (admin, ``manage.py queue_limits``). The claim skips a tenant at its limit.
    max_running_runs = models.PositiveIntegerField(null=True, blank=True)
    #: When the claim last took one of the tenant's runs: the fair claim serves the tenant
    #: waiting longest first, and a claim under a limit checks it did not change meanwhile.
    last_claimed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("slug",)

    def __str__(self) -> str:
        return self.slug


class Project(models.Model):
    """A unit of work inside a tenant; its slug is unique in the tenant."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="projects")
    slug = models.SlugField(max_length=63)
    name = models.CharField(max_length=200)
    #: As :attr:`Tenant.max_running_runs`, for the project's runs.
    max_running_runs = models.PositiveIntegerField(null=True, blank=True)
    #: As :attr:`Tenant.last_claimed_at`, for the project's runs.
    last_claimed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    #: Scoped by its own id: a restricted token sees only its projects.
    scope_project_path: ClassVar[str | None] = "id"
    objects = ScopedManager()

    class Meta:
        ordering = ("tenant", "slug")
        constraints = [
            models.UniqueConstraint(fields=("tenant", "slug"), name="project_slug_unique_in_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.slug}"


class Membership(models.Model):
    """A user's role in a tenant (viewer, operator or admin)."""

    ROLE_CHOICES: ClassVar[list[tuple[str, str]]] = [(r, r) for r in ROLES]

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=ROLE_CHOICES)
    created_at = models.DateTimeField(auto_now_add=True)

    scope_project_path: ClassVar[str | None] = TENANT_WIDE
    objects = ScopedManager()

    class Meta:
        ordering = ("tenant", "user")
        constraints = [
            models.UniqueConstraint(fields=("user", "tenant"), name="membership_unique"),
            models.CheckConstraint(condition=Q(role__in=ROLES), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id}:{self.role}"


class ApiToken(models.Model):
    """A bearer token of a tenant: explicit grants, optional project restriction, hashed secret."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="tokens")
    name = models.CharField(max_length=200)
    #: Public, unique, shown in listings and audit rows; identifies the token without its secret.
    prefix = models.CharField(max_length=16, unique=True)
    #: SHA-256 (hex) of the whole token string. The token itself is shown once and never stored.
    secret_hash = models.CharField(max_length=64)
    grants = models.JSONField(default=list)
    #: Empty means every project of the tenant; otherwise only these.
    projects = models.ManyToManyField(Project, blank=True, related_name="tokens")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    #: A token belongs to the tenant (its project restriction is what it grants, not where it
    #: lives).
    scope_project_path: ClassVar[str | None] = TENANT_WIDE
    objects = ScopedManager()

    class Meta:
        ordering = ("tenant", "-created_at")
        constraints = [
            models.CheckConstraint(
                condition=Q(secret_hash__regex=r"^[0-9a-f]{64}$"),  # noqa: S106
                name="token_hash_is_sha256",
            ),
            models.CheckConstraint(
                condition=Q(expires_at__isnull=True) | Q(expires_at__gt=models.F("created_at")),
                name="token_expires_after_creation",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix} ({self.name})"


class AuditEventQuerySet(ScopedQuerySet["AuditEvent"]):
    """Scoped like every tenant-owned queryset, and append-only."""

    def update(self, **kwargs: Any) -> int:
        raise TypeError("the audit log is append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise TypeError("the audit log is append-only")


class AuditEvent(models.Model):
    """One audited fact, written after its outcome is known. Append-only for the runtime.

    The runtime database role has no UPDATE or DELETE on this table (``openrath-migrate``).
    """

    #: ``openrath-migrate`` revokes UPDATE/DELETE/TRUNCATE on this table from the runtime role.
    append_only_for_runtime: ClassVar[bool] = True

    OUTCOMES: ClassVar[tuple[str, ...]] = ("success", "failure", "denied")

    id = models.BigAutoField(primary_key=True)
    created_at = models.DateTimeField(db_default=Now())
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    #: ``user:<username>``, ``token:<prefix>``, ``cli:<os user>``, ``system`` or ``anonymous``.
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    object_type = models.CharField(max_length=50, blank=True, default="")
    object_id = models.CharField(max_length=100, blank=True, default="")
    outcome = models.CharField(max_length=16)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    request_id = models.CharField(max_length=128, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ("-id",)
        indexes = [
            models.Index(fields=("tenant", "-id"), name="audit_tenant_recent"),
            models.Index(fields=("tenant", "action"), name="audit_tenant_action"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=("success", "failure", "denied")),
                name="audit_outcome_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.action} {self.outcome}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise TypeError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise TypeError("the audit log is append-only")
