"""OpenRath's ``rath.context``: :class:`RunContext`, what a run is submitted with and what a
step reads back as ``ctx.request``.

``RunContext(security=..., revision_id=..., deadline=..., project=...)``; ``RunContext.local()``
is the library's own context (tenant ``local``, see ``openrath_project.library``). The tenant is
this product's tenant slug and ``project`` a project slug in it (default ``default``). Pure
Python: the runtime facade (``openrath_project.runtime``) turns it into a project and a run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from openrath_project.security import Principal, PrincipalKind, SecurityContext

__all__ = ["RunContext"]

#: The library's tenant and project slugs (kept equal to ``openrath_project.library``'s).
_LOCAL_TENANT = "local"
_DEFAULT_PROJECT = "default"


@dataclass(frozen=True)
class RunContext:
    """Who a run acts for and its limits: security, revision, deadline, project."""

    security: SecurityContext
    revision_id: uuid.UUID | None = None
    deadline: datetime | None = None
    project: str = _DEFAULT_PROJECT
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def tenant_id(self) -> str:
        return self.security.tenant_id

    @property
    def principal(self) -> Principal:
        return self.security.principal

    @classmethod
    def local(
        cls,
        *,
        revision_id: uuid.UUID | None = None,
        deadline: datetime | None = None,
        tenant_id: str | None = None,
        principal_id: str = "local",
    ) -> RunContext:
        """The context of a script: the library tenant (``OPENRATH_LIBRARY_TENANT``, default
        ``local``), its ``default`` project, a local user principal."""
        import os

        tenant = tenant_id or os.environ.get("OPENRATH_LIBRARY_TENANT", "").strip() or _LOCAL_TENANT
        return cls(
            security=SecurityContext(
                principal=Principal(id=principal_id, kind=PrincipalKind.USER), tenant_id=tenant
            ),
            revision_id=revision_id,
            deadline=deadline,
        )
