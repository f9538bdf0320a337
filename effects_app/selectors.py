"""Scoped reads of the effect ledger."""

from __future__ import annotations

import uuid

from django.db.models import Case, QuerySet, Value, When

from effects_app.models import EffectRecord
from openrath_project.errors import NotFound
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid


def effect_list(*, principal: Principal) -> QuerySet[EffectRecord]:
    """Effects of the principal's tenant and projects (selector decisions excluded)."""
    return EffectRecord.objects.for_principal(principal).exclude(effect_class="decision")


def effect_get(*, principal: Principal, effect_id: object) -> EffectRecord:
    as_uuid = parse_uuid(effect_id)
    effect = effect_list(principal=principal).filter(id=as_uuid).first() if as_uuid else None
    if effect is None:
        raise NotFound("effect not found", details={"effect": str(effect_id)})
    return effect


def effect_search(
    *,
    principal: Principal,
    status: str = "",
    step: str = "",
    run: uuid.UUID | None = None,
    effect_class: str = "",
) -> QuerySet[EffectRecord]:
    """The effects in scope matching every filter given (an empty filter matches all), those
    waiting in ``needs_review`` first, then newest first (ids are time-ordered)."""
    qs = effect_list(principal=principal)
    if status:
        qs = qs.filter(status=status)
    if step:
        qs = qs.filter(step=step)
    if run is not None:
        qs = qs.filter(run_id=run)
    if effect_class:
        qs = qs.filter(effect_class=effect_class)
    waiting_first = Case(When(status="needs_review", then=Value(0)), default=Value(1))
    return qs.order_by(waiting_first, "-id")
