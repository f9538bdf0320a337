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
#: Called with each :class:`StreamDelta` (text, tool-call pieces, finish reason, usage).
EventCallback = Callable[["StreamDelta"], None]


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


@dataclass(frozen=True)
class StreamDelta:
    """One piece of a streamed answer (OpenRath's ``RathLLMStreamDelta``); any subset is set.

    ``content_delta`` is a text fragment; ``tool_call_index`` / ``tool_call_id`` /
    ``tool_call_name_delta`` / ``tool_call_args_delta`` extend the tool call at that index;
    ``finish_reason`` comes once, on the last delta of the answer; ``usage`` (a :class:`Usage`)
    comes after it when the API reported token counts.
    """

    content_delta: str | None = None
    tool_call_index: int | None = None
    tool_call_id: str | None = None
    tool_call_name_delta: str | None = None
    tool_call_args_delta: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None


def turn_tail_deltas(turn: ModelTurn, *, with_tool_calls: bool = True) -> list[StreamDelta]:
    """The deltas that close a streamed turn: one per tool call (whole name and arguments),
    the finish reason, then the usage. For providers that stream text only."""
    deltas: list[StreamDelta] = []
    if with_tool_calls:
        for index, call in enumerate(turn.tool_calls):
            deltas.append(
                StreamDelta(
                    tool_call_index=index,
                    tool_call_id=call.id,
                    tool_call_name_delta=call.name,
                    tool_call_args_delta=call.arguments,
                )
            )
    deltas.append(StreamDelta(finish_reason=turn.finish_reason))
    deltas.append(StreamDelta(usage=turn.usage))
    return deltas


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

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_event: EventCallback,
    ) -> ModelTurn:
        """Run one model call, streaming :class:`StreamDelta` objects to ``on_event``.

        The default streams the text deltas as they come and then the tool calls, the finish
        reason and the usage of the finished turn; providers that see tool-call pieces arrive
        (``openai``) override it to pass them on as they come.
        """
        turn = self.complete(
            messages, tools, on_delta=lambda text: on_event(StreamDelta(content_delta=text))
        )
        for delta in turn_tail_deltas(turn):
            on_event(delta)
        return turn

    @property
    def provider_kind(self) -> str:
        """OpenRath's name for :attr:`kind`."""
        return self.kind

    def credential_available(self) -> bool:
        """Whether a call could authenticate, checked offline (no request is made)."""
        return True

    def __str__(self) -> str:
        # OpenRath prints a provider as its model name.
        return str(getattr(self, "model", "") or "(no model)")

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
