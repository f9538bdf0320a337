"""Model providers behind one neutral interface, built by kind from a registry.

``flow.Provider(...)`` (also ``openrath_project.llm.Provider``) builds one: today's form
``Provider(kind="scripted", fixture=[...])`` / ``Provider(model=..., api_key_env=...)`` and
OpenRath's ``Provider(model=, provider_kind=, api_key=, base_url=, ...)`` are the same call. The
``openai``, ``atlascloud`` and ``anthropic`` kinds (all OpenAI-compatible endpoints, through the
official openai SDK) and ``scripted`` are registered on import; ``register_provider`` adds more.
"""

from __future__ import annotations

from typing import Any

from sessions_app.providers.base import (
    DeltaCallback,
    EventCallback,
    ModelTurn,
    Provider,
    ProviderError,
    ProviderRequestError,
    ProviderUnavailable,
    ScriptExhausted,
    StreamDelta,
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


def _gateway_provider(gateway: str) -> Any:
    def build(**options: Any) -> Provider:
        from sessions_app.providers.openai_provider import OpenAIProvider

        return OpenAIProvider(gateway=gateway, **options)

    return build


register_provider("openai", _openai_provider)
register_provider("atlascloud", _gateway_provider("atlascloud"))
register_provider("anthropic", _gateway_provider("anthropic"))
register_provider(ScriptedProvider.kind, ScriptedProvider)


def __getattr__(name: str) -> Any:
    if name in ("OpenAIProvider", "ProviderConfigError"):
        from sessions_app.providers import openai_provider

        return getattr(openai_provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_provider(
    kind: str | None = None, *, provider_kind: str | None = None, **options: Any
) -> Provider:
    """Build a provider: ``make_provider(kind="scripted", fixture=[...])`` or OpenRath's
    ``make_provider(provider_kind="openai", model=..., api_key=...)``; the kind defaults to
    ``openai``. Options left ``None`` (OpenRath's "unset") are dropped."""
    if kind is not None and provider_kind is not None and kind != provider_kind:
        raise ValueError(
            f"kind={kind!r} and provider_kind={provider_kind!r} disagree; pass one of them"
        )
    chosen = kind or provider_kind or "openai"
    given = {name: value for name, value in options.items() if value is not None}
    return create_provider(chosen, **given)


class _ProviderFactory(type):
    """``Provider(...)`` builds a provider of the chosen kind; ``isinstance(p, Provider)`` is
    true of every provider. One name for OpenRath's dataclass-like ``Provider`` and ours."""

    def __call__(cls, *args: Any, **options: Any) -> Provider:
        return make_provider(*args, **options)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, Provider)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, Provider)


class ProviderFactory(metaclass=_ProviderFactory):
    """``flow.Provider``: see :func:`make_provider` for the arguments."""


__all__ = [
    "DeltaCallback",
    "EventCallback",
    "ModelTurn",
    "OpenAIProvider",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "ProviderFactory",
    "ProviderRequestError",
    "ProviderUnavailable",
    "ScriptExhausted",
    "ScriptedProvider",
    "StreamDelta",
    "ToolCallRequest",
    "Usage",
    "create_provider",
    "make_provider",
    "register_provider",
    "registered_kinds",
]
