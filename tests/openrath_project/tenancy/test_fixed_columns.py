"""An object's tenant and project never change after creation; a token's revocation is one-way.

Both in the model layer (a save is refused before any SQL) and in the database (an update
through any path is refused by a trigger), on PostgreSQL and SQLite.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from memory_app import services as memory_services
from memory_app.models import MemoryEntry, MemoryStats, MemoryTerm
from openrath_project.tenancy import fixed_columns
from openrath_project.tenancy.fixed_columns import FixedColumnChanged
from openrath_project.tenancy.models import ApiToken, AuditEvent, Membership, Project
from openrath_project.tenancy.services import audit_record, token_create, token_revoke
from sessions_app.models import Chunk, Session
from sessions_app.services import session_from_user_message
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_every_model_with_a_tenant_or_project_is_guarded():
    labels = {m._meta.label for m in fixed_columns.owned_models()}
    assert labels == {
        "tenancy.Project",
        "tenancy.Membership",
        "tenancy.ApiToken",
        "tenancy.AuditEvent",
        "sessions_app.Session",
        "sessions_app.Chunk",
        "sessions_app.LineageEdge",
        "runs_app.Run",
        "runs_app.RunFork",
        "runs_app.Interrupt",
        "effects_app.EffectRecord",
        "schedules_app.Schedule",
        "schedules_app.ScheduleFire",
        "webhooks_app.WebhookSubscription",
        "webhooks_app.WebhookDelivery",
        "webhooks_app.WebhookAttempt",
        "retention_app.RetentionPolicy",
        "retention_app.RetentionPass",
        "memory_app.MemoryEntry",
        "memory_app.MemoryTerm",
        "memory_app.MemoryStats",
    }
    assert fixed_columns.owner_columns(Project) == ("tenant_id",)
    assert fixed_columns.owner_columns(Session) == ("project_id", "tenant_id")
    assert fixed_columns.missing_guards() == []


def test_installing_is_idempotent_and_repairs_a_dropped_trigger():
    assert fixed_columns.install_guards() == []
    guard = next(g for g in fixed_columns.guards() if g.table == Project._meta.db_table)
    name = guard.name(connection.vendor)
    on = f' ON "{guard.table}"' if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f'DROP TRIGGER "{name}"{on}')
    assert fixed_columns.missing_guards() == [f"{guard.table}: ('tenant_id',)"]
    assert fixed_columns.install_guards() == [name]
    assert fixed_columns.missing_guards() == []


def test_a_project_keeps_its_tenant_in_the_model(project, other_tenant):
    project.tenant = other_tenant
    project.name = "moved"
    with pytest.raises(FixedColumnChanged) as refused:
        project.save()
    assert refused.value.details == {"tenant": ["fixed at creation"]}
    stored = Project.objects.get(pk=project.pk)
    assert (stored.tenant_id, stored.name) != (other_tenant.id, "moved")
    # Other fields still change, and a save that leaves the owner out is not checked.
    project.refresh_from_db()
    project.name = "renamed"
    project.save()
    project.tenant = other_tenant
    project.save(update_fields=["name"])
    assert Project.objects.get(pk=project.pk).tenant_id != other_tenant.id


def _refused_update(queryset, **values) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        queryset.update(**values)


def test_the_database_refuses_to_move_any_row(project, other_project, other_tenant, tenant):
    """Owner columns of every kind of row, changed by a bare UPDATE (no model code runs)."""
    foreign = Project.objects.create(tenant=other_tenant, slug="elsewhere", name="elsewhere")
    token, _ = token_create(tenant=tenant, name="all", grants=["*"])
    membership = MembershipFactory(user=UserFactory(username="mover"), tenant=tenant)
    session = session_from_user_message(project=project, text="hello world")
    entry, _ = memory_services.memory_remember(project=project, text="The launch is on Monday.")
    audit = audit_record(actor="system", action="x", outcome="success", tenant=tenant)
    rows = [
        (Project.objects.filter(pk=project.pk), {"tenant": other_tenant}),
        (ApiToken.objects.filter(pk=token.pk), {"tenant": other_tenant}),
        (Membership.objects.filter(pk=membership.pk), {"tenant": other_tenant}),
        (Session.objects.filter(pk=session.pk), {"tenant": other_tenant}),
        (Session.objects.filter(pk=session.pk), {"project": other_project}),
        (Chunk.objects.filter(session=session), {"tenant": other_tenant}),
        (MemoryEntry.objects.filter(pk=entry.pk), {"project": foreign}),
        (MemoryTerm.objects.filter(entry=entry), {"project": foreign}),
        (MemoryStats.objects.filter(project=project), {"project": foreign}),
    ]
    for queryset, values in rows:
        before = list(queryset.values_list("pk", *(f"{k}_id" for k in values)))
        assert before, queryset.model
        _refused_update(queryset, **values)
        assert list(queryset.values_list("pk", *(f"{k}_id" for k in values))) == before
    if connection.vendor == "sqlite":  # the runtime role may not UPDATE audit rows on PostgreSQL
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f'UPDATE "{AuditEvent._meta.db_table}" SET tenant_id = %s WHERE id = %s',
                [other_tenant.id.hex, audit.id],
            )
    # Updating other columns, and writing the same owner again, are fine.
    assert Project.objects.filter(pk=project.pk).update(name="renamed", tenant=tenant) == 1
    assert Session.objects.filter(pk=session.pk).update(title="t") == 1


def test_revocation_is_one_way(tenant):
    token, _ = token_create(tenant=tenant, name="ci", grants=["runs:read"])
    # Revoking is an update from NULL: allowed.
    revoked = token_revoke(prefix=token.prefix)
    assert revoked.revoked_at is not None
    for value in (None, timezone.now()):
        _refused_update(ApiToken.objects.filter(pk=token.pk), revoked_at=value)
        assert ApiToken.objects.get(pk=token.pk).revoked_at == revoked.revoked_at
    revoked.revoked_at = None
    with pytest.raises(IntegrityError), transaction.atomic():
        revoked.save()
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    # Revoking again keeps the first time; other fields still change.
    assert (
        token_revoke(prefix=token.prefix).revoked_at == ApiToken.objects.get(pk=token.pk).revoked_at
    )
    assert ApiToken.objects.filter(pk=token.pk).update(name="renamed") == 1
