"""Tenancy factories: tenants, projects, users, memberships, and principals to read with."""

from __future__ import annotations

from collections.abc import Iterable

import factory
from django.contrib.auth import get_user_model

from openrath_project.tenancy.grants import GRANTS
from openrath_project.tenancy.models import Membership, Project, Tenant
from openrath_project.tenancy.principal import Principal


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    tenant = factory.SubFactory(TenantFactory)
    slug = factory.Sequence(lambda n: f"project-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "correct-horse-battery")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = "operator"


def principal_for(
    tenant: Tenant,
    *,
    grants: Iterable[str] = GRANTS,
    projects: Iterable[Project] | None = None,
    actor: str = "test:principal",
) -> Principal:
    """A principal of ``tenant`` for selector and service tests (every grant by default;
    ``projects`` restricts it as a project-scoped token is)."""
    return Principal(
        tenant=tenant,
        grants=frozenset(grants),
        project_ids=None if projects is None else frozenset(p.id for p in projects),
        actor=actor,
    )
