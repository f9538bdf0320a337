"""OpenRath's ``rath.runtime`` names over this product's engine (docs/migrating-from-openrath.md,
'Durable runtime'). Re-exported lazily: importing this package needs no configured Django, so a
store can choose the database first (``openrath_project.runtime.store``)."""

from __future__ import annotations

import importlib
from typing import Any

from openrath_project.runtime import models as _models

_EXPORTS: dict[str, str] = {
    "LocalRuntime": "openrath_project.runtime.local:LocalRuntime",
    "RunStore": "openrath_project.runtime.store:RunStore",
    "SQLiteRunStore": "openrath_project.runtime.store:SQLiteRunStore",
    "PostgresRunStore": "openrath_project.runtime.store:PostgresRunStore",
    "StoreMismatch": "openrath_project.runtime.store:StoreMismatch",
    "EffectLedger": "openrath_project.runtime.effects:EffectLedger",
    "SQLiteEffectLedger": "openrath_project.runtime.effects:SQLiteEffectLedger",
    "PostgresEffectLedger": "openrath_project.runtime.effects:PostgresEffectLedger",
    "arguments_digest": "openrath_project.runtime.effects:arguments_digest",
    "reconcile_stale_effects": "openrath_project.runtime.effects:reconcile_stale_effects",
    "Reconciliation": "openrath_project.runtime.effects:Reconciliation",
}
#: The pure values and errors (no Django): every public name of ``runtime.models`` but its
#: freeze/thaw helpers.
_PURE: dict[str, str] = {
    name: f"openrath_project.runtime.models:{name}"
    for name in _models.__all__
    if name not in ("freeze", "thaw")
}


def __getattr__(name: str) -> Any:
    target = _PURE.get(name) or _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(_PURE))


__all__ = sorted({*_EXPORTS, *_PURE})
