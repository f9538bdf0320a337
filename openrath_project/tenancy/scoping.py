"""The tenant scope, written once: ``Model.objects.for_principal(principal)``.

Every tenant-owned model (a model with a ``tenant`` foreign key) has :data:`ScopedManager` (or
a manager made from :class:`ScopedQuerySet`) as its default manager, so its rows are read in
one of two spelled-out ways:

* ``Model.objects.for_principal(principal)``: the principal's tenant and, for a token
  restricted to some projects, those projects only. A model reaches its project through
  ``scope_project_path`` (a lookup ending in the project id: ``"project_id"`` by default when
  the model has a ``project`` field, ``"session__project_id"`` for a chunk, ``"id"`` for the
  Project itself, ``None`` for rows that belong to the whole tenant: memberships, tokens).
* ``Model.objects.unscoped()``: the plain queryset, for code that works by ids it already holds
  (workers, services, commands, a selector reading the chunks of a session read in scope). In
  principal-facing modules each use carries a ``# scope: <why>`` comment.

``Model.objects.filter(...)`` keeps working (engine code and tests), but the principal-facing
modules (``*/api/``, ``*/selectors.py``, the console, the WebSocket consumers) may only start
with one of the two: ``tests/hardening/test_scoping_rule.py`` walks their source and fails on
anything else, naming the file, the line and the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import models

if TYPE_CHECKING:
    from openrath_project.tenancy.principal import Principal

M = TypeVar("M", bound=models.Model)

#: The ``scope_project_path`` of rows that belong to the whole tenant, not to a project.
TENANT_WIDE = None

_UNSET = object()


def project_path(model: type[models.Model]) -> str | None:
    """The lookup from ``model`` to its project id (``None``: tenant-wide rows).

    A model with no ``project`` field must say which it is: guessing "tenant-wide" would
    let a project-restricted token read rows of the tenant's other projects."""
    declared: Any = getattr(model, "scope_project_path", _UNSET)
    if declared is not _UNSET:
        if declared is not None and not isinstance(declared, str):
            raise ImproperlyConfigured(
                f"{model.__name__}.scope_project_path must be a lookup string or None"
            )
        return declared
    if any(field.name == "project" for field in model._meta.get_fields()):
        return "project_id"
    raise ImproperlyConfigured(
        f"{model.__name__} is tenant-owned but has no project field: set scope_project_path "
        '(e.g. "run__project_id") or scope_project_path = TENANT_WIDE'
    )


class ScopedQuerySet(models.QuerySet[M]):
    """A queryset of tenant-owned rows that knows the one way to scope them."""

    def for_principal(self, principal: Principal) -> Self:
        """The rows the principal may see: its tenant's, and only its projects' when the
        principal is restricted to some (a row outside the scope is a 404, never a 403)."""
        scoped = self.filter(tenant_id=principal.tenant_id)
        if principal.project_ids is not None:
            path = project_path(self.model)
            if path is not None:
                scoped = scoped.filter(**{f"{path}__in": principal.project_ids})
        return scoped

    def unscoped(self) -> Self:
        """Every row, whoever asks: the caller holds ids it was given in scope (or is the
        engine). Say why with a ``# scope:`` comment where a principal is at hand."""
        return self.all()


ScopedManager = models.Manager.from_queryset(ScopedQuerySet)
