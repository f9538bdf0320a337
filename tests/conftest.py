"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.services import token_create
from tests.factories import ProjectFactory, TenantFactory


@pytest.fixture
def tenant(db: Any) -> Tenant:
    return TenantFactory(slug="acme")


@pytest.fixture
def project(tenant: Tenant) -> Project:
    return ProjectFactory(tenant=tenant, slug="research")


@pytest.fixture
def other_project(tenant: Tenant) -> Project:
    return ProjectFactory(tenant=tenant, slug="ops")


@pytest.fixture
def other_tenant(db: Any) -> Tenant:
    return TenantFactory(slug="globex")


@pytest.fixture
def foreign_project(other_tenant: Tenant) -> Project:
    return ProjectFactory(tenant=other_tenant, slug="research")


MakeToken = Callable[..., str]


@pytest.fixture
def make_token(tenant: Tenant) -> MakeToken:
    """``make_token(grants, projects=(), tenant=..., expires_in=...)`` -> the raw bearer token."""

    def make(
        grants: Iterable[str] = ("*",),
        *,
        projects: Iterable[Project] = (),
        tenant: Tenant = tenant,
        expires_in: timedelta | None = None,
        name: str = "test",
    ) -> str:
        _, raw = token_create(
            tenant=tenant,
            name=name,
            grants=list(grants),
            projects=list(projects),
            expires_in=expires_in,
        )
        return raw

    return make


@pytest.fixture
def client_for() -> Callable[[str | None], APIClient]:
    """An API client sending the given bearer token (or none)."""

    def make(raw: str | None) -> APIClient:
        client = APIClient()
        if raw is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make
