"""The neutral model-provider interface: one call in, one :class:`ModelTurn` out.

Messages and tools use the OpenAI chat-completions shapes, the lingua franca of model APIs, so a
session's chunks map onto them once (in the agent loop) and every provider speaks the same
language. Pure Python: no Django import.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Called with each text delta while a streamed answer is generated.
DeltaCallback = Callable[[str], None]


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call the model asked for; ``arguments`` is the raw JSON text it produced."""

    id: str
    name: str
    arguments: str

    def as_dict(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry of an assistant message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Usage:
    """Token counts of one or more model calls; ``+`` sums them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ModelTurn:
    """What one model call produced: text and/or tool calls, with usage and provenance."""

    text: str | None
    tool_calls: tuple[ToolCallRequest, ...]
    usage: Usage
    model: str
    provider: str
    finish_reason: str

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation before sending tool results."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        return message


class ProviderError(Exception):
    """Base of every error a provider raises on purpose."""


class ProviderRequestError(ProviderError):
    """The model API refused the request (a 4xx other than 429); retrying will not help."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ProviderUnavailable(ProviderError):
    """The model API kept failing (429, 5xx, connection errors, timeouts) until retries ran out."""


class ScriptExhausted(ProviderError):
    """The scripted provider has no turn left (sequence mode) or no matching rule (rules mode)."""


class Provider(ABC):
    """A model endpoint. Instances are safe to share between threads."""

    kind: str
    model: str

    @abstractmethod
    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelTurn:
        """Run one model call.

        With ``on_delta`` the provider streams and calls it with every text delta as it
        arrives, then still returns the complete turn.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kind={self.kind!r} model={self.model!r}>"


ProviderFactory = Callable[..., Provider]

_registry: dict[str, ProviderFactory] = {}
_registry_lock = threading.Lock()


def register_provider(kind: str, factory: ProviderFactory) -> None:
    """Make ``create_provider(kind, ...)`` call ``factory(**options)``; re-registering replaces."""
    if not kind or not kind.strip():
        raise ValueError("a provider kind must be a non-empty string")
    with _registry_lock:
        _registry[kind] = factory


def registered_kinds() -> tuple[str, ...]:
    """The registered provider kinds, sorted."""
    with _registry_lock:
        return tuple(sorted(_registry))


def create_provider(kind: str, **options: Any) -> Provider:
    """Build a provider of a registered kind; an unknown kind names the known ones."""
    with _registry_lock:
        factory = _registry.get(kind)
    if factory is None:
        known = ", ".join(registered_kinds()) or "(none)"
        raise ValueError(f"unknown provider kind {kind!r}; known kinds: {known}")
    return factory(**options)
