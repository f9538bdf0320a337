"""Model providers behind one neutral interface, built by kind from a registry.

``make_provider(kind="openai", model=...)`` is what users call as ``flow.Provider(...)``; the
``openai`` and ``scripted`` kinds are registered on import, and ``register_provider`` adds more.
"""

from __future__ import annotations

from typing import Any

from sessions_app.providers.base import (
    DeltaCallback,
    ModelTurn,
    Provider,
    ProviderError,
    ProviderRequestError,
    ProviderUnavailable,
    ScriptExhausted,
    ToolCallRequest,
    Usage,
    create_provider,
    register_provider,
    registered_kinds,
)
from sessions_app.providers.scripted import ScriptedProvider


def _openai_provider(**options: Any) -> Provider:
    # The openai SDK takes about a second to import: only processes that use it pay for it.
    from sessions_app.providers.openai_provider import OpenAIProvider

    return OpenAIProvider(**options)


register_provider("openai", _openai_provider)
register_provider(ScriptedProvider.kind, ScriptedProvider)


def __getattr__(name: str) -> Any:
    if name in ("OpenAIProvider", "ProviderConfigError"):
        from sessions_app.providers import openai_provider

        return getattr(openai_provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_provider(kind: str = "openai", **options: Any) -> Provider:
    """Build a provider: ``make_provider(kind="scripted", fixture=[...])`` (``flow.Provider``)."""
    return create_provider(kind, **options)


__all__ = [
    "DeltaCallback",
    "ModelTurn",
    "OpenAIProvider",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "ProviderRequestError",
    "ProviderUnavailable",
    "ScriptExhausted",
    "ScriptedProvider",
    "ToolCallRequest",
    "Usage",
    "create_provider",
    "make_provider",
    "register_provider",
    "registered_kinds",
]
