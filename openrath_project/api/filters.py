"""Filters every scoped list shares: the project (a slug or id, resolved in the caller's scope,
so another tenant's project is a 404) and the creation time range."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet

from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import project_get


class ProjectScopedFilterSet(django_filters.FilterSet):
    """``?project=<slug or id>``; subclasses set ``Meta.model`` and add their own filters."""

    project = django_filters.CharFilter(method="filter_project", help_text="A project slug or id.")

    def filter_project(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        principal: Principal = self.request.principal
        return queryset.filter(project=project_get(principal=principal, ref=value))


class CreatedRangeFilterSet(ProjectScopedFilterSet):
    """Also ``?created_after=`` (inclusive) and ``?created_before=`` (exclusive), ISO 8601."""

    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
