"""Scoped reads of the effect ledger."""

from __future__ import annotations

from django.db.models import QuerySet

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
