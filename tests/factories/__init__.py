"""Test factories, one module per app (``tenancy``, ``sessions``, ``runs``, ``effects``,
``memory``); the tenancy factories are re-exported here, where they always lived.

Rows a service writes are made by that service (sessions, chunks, memory, queued runs); rows
only the engine writes mid-run (a run's status, interrupts, checkpoints, ledger entries) are
saved directly, in the shape the engine leaves them."""

from tests.factories.tenancy import (
    MembershipFactory,
    ProjectFactory,
    TenantFactory,
    UserFactory,
    principal_for,
)

__all__ = [
    "MembershipFactory",
    "ProjectFactory",
    "TenantFactory",
    "UserFactory",
    "principal_for",
]
