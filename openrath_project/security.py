"""OpenRath's ``rath.security`` names for who a run acts for: :class:`Principal`,
:class:`PrincipalKind`, :class:`SecurityContext`.

In this product a run belongs to a tenant and a project; its security context is rebuilt from
the stored run (tenant slug, the principal recorded as its creator), never from the submitting
process, so a worker in another process sees what the submitter had. Grants are not stored with
a run: access is decided by tokens and scopes at the API (docs/api.md). Pure Python.

OpenRath's audit sinks are refused on purpose (``OpenRathNameUnsupported``, naming what to use):
operator and API actions are audited by the product itself, in the database, never through a
sink object the caller wires in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["Principal", "PrincipalKind", "SecurityContext"]

_AUDIT = (
    "the product audits operator and API actions itself, in its database (who, what, when, "
    "the outcome), whatever the caller wires in; there is no sink object to pass to a server"
)
_AUDIT_INSTEAD = (
    "read the audit trail with GET /api/v1/audit/ (or the console); the JSON logs "
    "(OPENRATH_LOG_FORMAT=json) carry the request id for log collectors"
)

#: OpenRath's ``rath.security`` names this product leaves out -> (why, what to use instead).
UNSUPPORTED: dict[str, tuple[str, str]] = {
    "StructuredAuditSink": (_AUDIT, _AUDIT_INSTEAD),
    "AuditSink": (_AUDIT, _AUDIT_INSTEAD),
    "InMemoryAuditSink": (_AUDIT, _AUDIT_INSTEAD),
}


def __getattr__(name: str) -> object:
    from openrath_project.compat import OpenRathNameUnsupported

    entry = None if name.startswith("__") else UNSUPPORTED.get(name)
    if entry is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise OpenRathNameUnsupported(__name__, name, *entry)


class PrincipalKind(StrEnum):
    USER = "user"
    SERVICE = "service"
    SYSTEM = "system"


@dataclass(frozen=True)
class Principal:
    """Who acts: an id and a kind. Stored on a run as ``created_by`` (``"<kind>:<id>"``)."""

    id: str
    kind: PrincipalKind = PrincipalKind.USER

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError("a principal needs a non-empty id")
        object.__setattr__(self, "kind", PrincipalKind(self.kind))

    @property
    def actor(self) -> str:
        """The form recorded on runs and events."""
        return f"{self.kind.value}:{self.id}"

    @classmethod
    def from_actor(cls, actor: str) -> Principal:
        """The principal of a recorded actor string (``"user:42"``; a bare id is a user)."""
        kind, sep, ident = actor.partition(":")
        if sep and kind in PrincipalKind.__members__.values() and ident:
            return cls(id=ident, kind=PrincipalKind(kind))
        return cls(id=actor or "anonymous", kind=PrincipalKind.USER)


@dataclass(frozen=True)
class SecurityContext:
    """The principal, the tenant (this product's tenant *slug*) and the grants asked for."""

    principal: Principal
    tenant_id: str
    grants: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.tenant_id, str) or not self.tenant_id.strip():
            raise ValueError("a security context needs a tenant_id (the tenant's slug)")
        object.__setattr__(self, "grants", frozenset(self.grants))
