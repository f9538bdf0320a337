"""OpenRath's ``rath.llm`` names: ``from openrath_project.llm import Provider, RathLLMStreamDelta``.

These are the product's own provider types under OpenRath's names (one implementation, see
``sessions_app.providers``):

* ``Provider(model=, provider_kind=, api_key=, base_url=, temperature=, max_tokens=, ...)`` —
  also today's ``Provider(kind="scripted", fixture=[...])`` and ``api_key_env=``; it returns a
  provider of the chosen kind (``openai``, ``atlascloud``, ``anthropic``, ``scripted``), and
  ``isinstance(p, Provider)`` holds for every provider. ``str(p)`` is the model name.
* ``RathLLMStreamDelta`` — what ``Agent(on_event=...)`` receives: ``content_delta``,
  ``tool_call_index`` / ``tool_call_id`` / ``tool_call_name_delta`` / ``tool_call_args_delta``,
  ``finish_reason`` and ``usage`` (a ``RathLLMTokenUsage``).

Importing this module needs no configured Django.
"""

from __future__ import annotations

from sessions_app.providers import ProviderFactory as Provider
from sessions_app.providers import registered_kinds
from sessions_app.providers.base import ModelTurn, ProviderError, StreamDelta, Usage

RathLLMStreamDelta = StreamDelta
RathLLMTokenUsage = Usage
#: The provider-neutral result of one model call (OpenRath's chat response, simplified).
RathLLMChatTurn = ModelTurn


def add_usage(a: Usage | None, b: Usage | None) -> Usage | None:
    """The sum of two usages; ``None`` only when both are ``None`` (as in OpenRath)."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


__all__ = [
    "Provider",
    "ProviderError",
    "RathLLMChatTurn",
    "RathLLMStreamDelta",
    "RathLLMTokenUsage",
    "add_usage",
    "registered_kinds",
]
