"""``Model.objects.for_principal`` / ``unscoped``: the one tenant scope, on real rows.

Tenant A has two projects (``research`` with a session, its fork and a chunk; ``ops`` with a
session), tenant B one project with a session; audit rows and memberships in both.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from openrath_project.tenancy.models import AuditEvent, Membership, Project, Tenant
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.services import audit_record
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Chunk, LineageEdge, Session
from tests.factories import MembershipFactory, ProjectFactory, TenantFactory

pytestmark = pytest.mark.django_db


@dataclass
class World:
    a: Tenant
    research: Project
    ops: Project
    b: Tenant
    foreign: Project
    root: Session
    fork: Session
    ops_session: Session
    foreign_session: Session


def _session(project: Project, text: str) -> Session:
    draft = make_draft(role="user", content={"text": text})
    return session_services.session_create(project=project, title=text, chunks=[draft])


@pytest.fixture
def world() -> World:
    a = TenantFactory(slug="scope-a")
    b = TenantFactory(slug="scope-b")
    research = ProjectFactory(tenant=a, slug="research")
    ops = ProjectFactory(tenant=a, slug="ops")
    foreign = ProjectFactory(tenant=b, slug="research")
    root = _session(research, "root")
    fork = session_services.session_fork(session=root)
    for tenant, project in ((a, research), (a, ops), (b, foreign)):
        audit_record(
            actor="test", action="probe", outcome="success", tenant=tenant, project=project
        )
    MembershipFactory(tenant=a)
    MembershipFactory(tenant=b)
    return World(
        a=a,
        research=research,
        ops=ops,
        b=b,
        foreign=foreign,
        root=root,
        fork=fork,
        ops_session=_session(ops, "ops"),
        foreign_session=_session(foreign, "foreign"),
    )


def principal(tenant: Tenant, *projects: Project) -> Principal:
    return Principal(
        tenant=tenant,
        grants=frozenset(),
        project_ids=frozenset(p.id for p in projects) if projects else None,
        actor="test",
    )


def test_a_tenant_wide_principal_sees_every_project_of_its_tenant_only(world: World) -> None:
    whole_a = principal(world.a)
    assert set(Session.objects.for_principal(whole_a)) == {
        world.root,
        world.fork,
        world.ops_session,
    }
    assert set(Project.objects.for_principal(whole_a)) == {world.research, world.ops}
    assert set(AuditEvent.objects.for_principal(whole_a).values_list("project", flat=True)) == {
        world.research.id,
        world.ops.id,
    }
    assert set(Session.objects.for_principal(principal(world.b))) == {world.foreign_session}


def test_a_project_restricted_principal_sees_only_its_projects(world: World) -> None:
    only_ops = principal(world.a, world.ops)
    assert list(Session.objects.for_principal(only_ops)) == [world.ops_session]
    assert list(Project.objects.for_principal(only_ops)) == [world.ops]
    assert list(AuditEvent.objects.for_principal(only_ops).values_list("project", flat=True)) == [
        world.ops.id
    ]
    # Reached through a relation: a chunk by its session's project, an edge by its child's.
    assert list(Chunk.objects.for_principal(only_ops).values_list("session", flat=True)) == [
        world.ops_session.id
    ]
    assert not LineageEdge.objects.for_principal(only_ops).exists()
    only_research = principal(world.a, world.research)
    assert list(
        LineageEdge.objects.for_principal(only_research).values_list("child", flat=True)
    ) == [world.fork.id]


def test_a_project_restriction_does_not_hide_tenant_wide_rows(world: World) -> None:
    # Memberships belong to the tenant, not to a project (scope_project_path = TENANT_WIDE).
    only_ops = principal(world.a, world.ops)
    assert list(Membership.objects.for_principal(only_ops)) == list(
        Membership.objects.filter(tenant=world.a)
    )
    assert Membership.objects.for_principal(only_ops).count() == 1


def test_a_principal_of_another_tenant_reaches_nothing_even_naming_the_ids(world: World) -> None:
    # B's principal "restricted" to A's project ids still sees no row of A.
    confused = principal(world.b, world.research, world.ops)
    assert not Session.objects.for_principal(confused).filter(id=world.root.id).exists()
    assert not Project.objects.for_principal(confused).exists()
    assert not Chunk.objects.for_principal(confused).exists()


def test_unscoped_and_the_plain_manager_see_every_row(world: World) -> None:
    every = {world.root, world.fork, world.ops_session, world.foreign_session}
    assert set(Session.objects.unscoped()) == every
    assert set(Session.objects.filter(id__in=[s.id for s in every])) == every
    # Chained after other calls too, and the scope composes with later filters.
    only_ops = principal(world.a, world.ops)
    assert list(Session.objects.filter(title="ops").for_principal(only_ops)) == [world.ops_session]
    assert not Session.objects.filter(project=world.research).for_principal(only_ops).exists()


def test_the_audit_log_stays_append_only_when_scoped(world: World) -> None:
    scoped = AuditEvent.objects.for_principal(principal(world.a))
    with pytest.raises(TypeError, match="append-only"):
        scoped.update(action="changed")
    with pytest.raises(TypeError, match="append-only"):
        scoped.delete()
    assert AuditEvent.objects.filter(action="changed").count() == 0
