"""Scoped reads of retention policies and their pass log."""

from __future__ import annotations

from django.db.models import QuerySet

from openrath_project.errors import NotFound
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid
from retention_app.models import RetentionPass, RetentionPolicy


def policy_list(*, principal: Principal) -> QuerySet[RetentionPolicy]:
    """Policies in the principal's tenant and projects."""
    return RetentionPolicy.objects.for_principal(principal)


def policy_get(*, principal: Principal, policy_id: object) -> RetentionPolicy:
    """A policy in scope, or 404 (another tenant's is indistinguishable from a missing one)."""
    as_uuid = parse_uuid(policy_id)
    policy = (
        policy_list(principal=principal)
        .select_related("project__tenant")
        .filter(id=as_uuid)
        .first()
        if as_uuid
        else None
    )
    if policy is None:
        raise NotFound("retention policy not found", details={"policy": str(policy_id)})
    return policy


def pass_list(*, policy: RetentionPolicy) -> QuerySet[RetentionPass]:
    """The passes of a policy read in scope, latest first."""
    # scope: the policy was read through policy_get
    return RetentionPass.objects.unscoped().filter(policy_id=policy.id).order_by("-id")
