"""Durable boundaries for workflow authors: ``@step``, ``@router``, ``RetryPolicy``, effects.

Source-compatible with OpenRath 2.0 (``rath.definition``): the same keyword arguments, defaults,
metadata attribute (``__openrath_node_spec__``) and error messages, so an OpenRath durable
workflow ports by changing its imports. Additions, all opt-in:

- bare ``@step`` (without parentheses) means ``@step()``;
- ``effects`` also accepts the enum's string value (``effects="read_only"``);
- ``join=True`` marks the step where the parallel branches of a router fan-out meet
  (see :mod:`runs_app.plan` for the rule);
- ``timeout_seconds <= 0``, a string passed as ``successors`` and a successor listed twice are
  refused when decorating, not later.

Pure Python: no Django import (an import-linter contract keeps it so).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Literal, TypeVar, overload

__all__ = [
    "NODE_SPEC_ATTR",
    "EffectClass",
    "NodeKind",
    "NodeMeta",
    "RetryPolicy",
    "node_meta",
    "router",
    "step",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The attribute the decorators set on a handler function (the same name as OpenRath's).
NODE_SPEC_ATTR: Final = "__openrath_node_spec__"

NodeKind = Literal["step", "router"]


# (str, Enum), not StrEnum: the same class shape (and str()) as OpenRath's EffectClass.
class EffectClass(str, Enum):  # noqa: UP042
    """What running a step does to the world; decides whether a retry may repeat it."""

    NONE = "none"
    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    NON_IDEMPOTENT = "non_idempotent"

    @classmethod
    def coerce(cls, value: EffectClass | str) -> EffectClass:
        """The member for ``value`` (a member or its string value); ``ValueError`` otherwise."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            expected = ", ".join(member.value for member in cls)
            raise ValueError(
                f"unknown effect class {value!r}; expected one of: {expected}"
            ) from None


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failed step attempt is retried, and the exponential backoff between tries.

    Numbers are stored as ``int`` / ``float`` so that ``RetryPolicy(base_seconds=1)`` and
    ``RetryPolicy(base_seconds=1.0)`` are the same value with the same canonical JSON.
    """

    max_attempts: int = 1
    base_seconds: float = 0.25
    max_seconds: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError("max_attempts must be an integer")
        for name in ("base_seconds", "max_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite")
            object.__setattr__(self, name, float(value))
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_seconds <= 0:
            raise ValueError("base_seconds must be greater than zero")
        if self.max_seconds < self.base_seconds:
            raise ValueError("max_seconds must be greater than or equal to base_seconds")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one."""
        if attempt < 1:
            raise ValueError("attempt must be at least 1")
        try:
            backoff = math.ldexp(self.base_seconds, attempt - 1)  # base * 2 ** (attempt - 1)
        except OverflowError:  # far past max_seconds anyway
            return self.max_seconds
        return min(self.max_seconds, backoff)

    def to_dict(self) -> dict[str, int | float]:
        return {
            "max_attempts": self.max_attempts,
            "base_seconds": self.base_seconds,
            "max_seconds": self.max_seconds,
        }


@dataclass(frozen=True)
class NodeMeta:
    """What a decorator recorded about one handler; the compiler turns it into a plan node."""

    kind: NodeKind
    entry: bool
    successors: tuple[str, ...]
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    effects: EffectClass = EffectClass.NON_IDEMPOTENT
    idempotency_key: str | None = None
    timeout_seconds: float | None = None
    checkpoint: bool = True
    join: bool = False


def node_meta(function: object) -> NodeMeta | None:
    """The metadata ``@step`` / ``@router`` stored on ``function``, or ``None``.

    Raises ``TypeError`` when the attribute holds something else, typically because the
    function was decorated with OpenRath's own ``rath.definition.step``: the imports were not
    changed.
    """
    meta = getattr(function, NODE_SPEC_ATTR, None)
    if meta is None or isinstance(meta, NodeMeta):
        return meta
    name = getattr(function, "__qualname__", repr(function))
    raise TypeError(
        f"{name} carries node metadata from another package ({type(meta).__module__}); "
        "import step and router from openrath_project.flow"
    )


def _successor_tuple(successors: Iterable[str]) -> tuple[str, ...]:
    if isinstance(successors, str):
        # tuple("price") would silently become ('p', 'r', 'i', 'c', 'e').
        raise TypeError(f"successors must be a tuple of node names, not the string {successors!r}")
    names = tuple(successors)
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"successor names must be non-empty strings, got {name!r}")
    return names


def _decorate(function: F, meta: NodeMeta) -> F:
    if not callable(function):
        raise TypeError(f"@{meta.kind} decorates a function, got {function!r}")
    qualname = getattr(function, "__qualname__", repr(function))
    if hasattr(function, NODE_SPEC_ATTR):
        raise ValueError(f"{qualname} already has OpenRath node metadata")
    if (
        meta.effects is EffectClass.NON_IDEMPOTENT
        and meta.retry.max_attempts > 1
        and not meta.idempotency_key
    ):
        raise ValueError("non-idempotent retries require idempotency_key")
    seen: set[str] = set()
    for name in meta.successors:
        if name in seen:
            raise ValueError(f"{qualname} lists successor {name!r} more than once")
        seen.add(name)
    setattr(function, NODE_SPEC_ATTR, meta)
    return function


@overload
def step(function: F, /) -> F: ...


@overload
def step(
    *,
    entry: bool = False,
    successors: tuple[str, ...] = (),
    retry: RetryPolicy | None = None,
    effects: EffectClass | str = EffectClass.NON_IDEMPOTENT,
    idempotency_key: str | None = None,
    timeout_seconds: float | None = None,
    checkpoint: bool = True,
    join: bool | None = None,
) -> Callable[[F], F]: ...


def step(
    function: F | None = None,
    /,
    *,
    entry: bool = False,
    successors: tuple[str, ...] = (),
    retry: RetryPolicy | None = None,
    effects: EffectClass | str = EffectClass.NON_IDEMPOTENT,
    idempotency_key: str | None = None,
    timeout_seconds: float | None = None,
    checkpoint: bool = True,
    join: bool | None = None,
) -> F | Callable[[F], F]:
    """Mark a workflow method as a durable step, called ``handler(state, ctx)``.

    A step has at most one successor; none ends the run. ``retry=None`` means one attempt.
    Retrying a ``non_idempotent`` step (the default effect class) needs an ``idempotency_key``.
    ``join=True`` makes the step the meeting point of a router's parallel branches.
    """
    if retry is None:
        retry = RetryPolicy()
    elif not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy or None, got {retry!r}")
    if timeout_seconds is not None:
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int | float):
            raise TypeError(f"timeout_seconds must be a number or None, got {timeout_seconds!r}")
        if not timeout_seconds > 0:
            raise ValueError("node timeout_seconds must be greater than zero")
        if math.isinf(timeout_seconds):
            raise ValueError("node timeout_seconds must be finite; use None for no timeout")
        timeout_seconds = float(timeout_seconds)
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key.strip()
    ):
        raise ValueError("idempotency_key must be a non-empty string or None")
    meta = NodeMeta(
        kind="step",
        entry=bool(entry),
        successors=_successor_tuple(successors),
        retry=retry,
        effects=EffectClass.coerce(effects),
        idempotency_key=idempotency_key,
        timeout_seconds=timeout_seconds,
        checkpoint=bool(checkpoint),
        join=bool(join),
    )

    def decorator(fn: F) -> F:
        return _decorate(fn, meta)

    if function is not None:
        return decorator(function)
    return decorator


def router(
    function: object = None,
    /,
    *,
    successors: tuple[str, ...] | None = None,
    entry: bool = False,
) -> Callable[[F], F]:
    """Mark a workflow method as a router choosing the next node among ``successors``.

    Defined ``def name(self, state)`` (OpenRath 2.0) or ``def name(self, state, ctx)``. It
    returns one successor's name, or a list of names to run them as parallel branches that meet
    at a ``join=True`` step (see :mod:`runs_app.plan`). Routers never change the state, are
    never retried and have the effect class ``none``.
    """
    if function is not None or successors is None:
        raise TypeError("@router needs its successors: use @router(successors=('a', 'b'))")
    names = _successor_tuple(successors)
    if not names:
        raise ValueError("router successors must not be empty")
    meta = NodeMeta(
        kind="router",
        entry=bool(entry),
        successors=names,
        effects=EffectClass.NONE,
    )

    def decorator(fn: F) -> F:
        return _decorate(fn, meta)

    return decorator
