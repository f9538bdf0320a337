"""The grant vocabulary and what each console role may do. Pure Python.

A token carries explicit grants from :data:`GRANTS`; an unknown name is refused. Console users
get the grants of their role in the tenant.
"""

from __future__ import annotations

from collections.abc import Iterable

GRANTS: tuple[str, ...] = (
    "projects:read",
    "projects:write",
    "sessions:read",
    "sessions:write",
    "runs:read",
    "runs:write",
    "runs:cancel",
    "interrupts:read",
    "interrupts:resolve",
    "effects:read",
    "effects:resolve",
    "memory:read",
    "memory:write",
    "audit:read",
    "tokens:manage",
)

ROLES: tuple[str, ...] = ("viewer", "operator", "admin")

READ_GRANTS = frozenset(g for g in GRANTS if g.endswith(":read"))

ROLE_GRANTS: dict[str, frozenset[str]] = {
    # Viewers look; they never act.
    "viewer": READ_GRANTS - {"audit:read"},
    # Operators run work and answer the runtime's questions (approvals, effect reviews).
    "operator": (READ_GRANTS - {"audit:read"})
    | {
        "sessions:write",
        "runs:write",
        "runs:cancel",
        "interrupts:resolve",
        "effects:resolve",
        "memory:write",
    },
    # Admins manage the tenant itself.
    "admin": frozenset(GRANTS),
}


class UnknownGrant(ValueError):
    """A grant name outside the vocabulary."""


def parse_grants(names: Iterable[str]) -> frozenset[str]:
    """Validate grant names; ``*`` means every grant. Raises :class:`UnknownGrant`."""
    cleaned = {n.strip() for n in names if n and n.strip()}
    if "*" in cleaned:
        return frozenset(GRANTS)
    unknown = sorted(cleaned - set(GRANTS))
    if unknown:
        raise UnknownGrant(
            f"unknown grant(s): {', '.join(unknown)}; known grants: {', '.join(GRANTS)}"
        )
    return frozenset(cleaned)


def grants_for_role(role: str) -> frozenset[str]:
    if role not in ROLE_GRANTS:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    return ROLE_GRANTS[role]
