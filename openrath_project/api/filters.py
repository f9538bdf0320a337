"""Filters every scoped list shares: the project (a slug or id, resolved in the caller's scope,
so another tenant's project is a 404) and the creation time range."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet
from django_filters.fields import IsoDateTimeField

from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import project_get


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 instant, converted to UTC. ISO allows offsets up to 24 hours; PostgreSQL
    refuses those beyond 15:59 (a 500 before this), and a year-1 or year-9999 instant may not
    exist in UTC at all: both are a 400 naming the parameter instead."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(
                "This date and time is out of range once converted to UTC.", code="overflow"
            ) from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    """``IsoDateTimeFilter`` whose value is always a UTC instant (see ``UtcIsoDateTimeField``)."""

    field_class = UtcIsoDateTimeField


class ProjectScopedFilterSet(django_filters.FilterSet):
    """``?project=<slug or id>``; subclasses set ``Meta.model`` and add their own filters."""

    project = django_filters.CharFilter(method="filter_project", help_text="A project slug or id.")

    def filter_project(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        principal: Principal = self.request.principal
        return queryset.filter(project=project_get(principal=principal, ref=value))


class CreatedRangeFilterSet(ProjectScopedFilterSet):
    """Also ``?created_after=`` (inclusive) and ``?created_before=`` (exclusive), ISO 8601."""

    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
