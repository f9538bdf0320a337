"""Eager composition: ``flow.Selector`` and ``flow.EmptyWorkflow``.

Calls themselves are tagged in :mod:`sessions_app.workflow`: ``Workflow.__call__`` runs
``forward`` through ``workflow_call``, inside a write context whose ``workflow`` is the call path
(``Outer/Research``), so every session, lineage edge and chunk written inside says which
(nested) workflow produced it.

``flow.Selector`` asks a model to pick one of several workflows and records the decision as an
``event`` chunk, so a selection can be audited and replayed (from a recorded session, or from a
durable run's decision store) without asking the model again. When the model answers ``-1``,
something that names no workflow, or an index off the menu, the selector returns a
``flow.EmptyWorkflow`` (whose ``forward`` returns the session unchanged), as OpenRath 2.0 does:
``while not isinstance(chosen := selector.forward(s, a, b), flow.EmptyWorkflow)`` ends.

This module is imported by ``runs_app.static_compile``, which must stay free of Django (the
import-linter contract follows lazy imports too), so it imports no Django, directly or not:
sessions are used through their methods (``append``, ``chunks``, ``id``).
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sessions_app import context
from sessions_app.providers.base import Provider, ProviderError
from sessions_app.workflow import AgentParam, Workflow, route_name

__all__ = [
    "DECISION_EVENT",
    "DEFAULT_SELECT_INSTRUCTION",
    "EmptyWorkflow",
    "Selector",
    "SelectorReplayError",
    "parse_selection",
]

DECISION_EVENT = "selector.decision"
DEFAULT_SELECT_INSTRUCTION = (
    "You route a conversation to the workflow best suited to handle it. "
    "Reply with the number of exactly one workflow from the menu and nothing else, "
    "or -1 if none of them applies or the task is already complete."
)
_INTEGER = re.compile(r"[+-]?\d+")
_INTEGER_TOKEN = re.compile(r"-?\d+")


class EmptyWorkflow(Workflow):
    """The selector's "nothing (more) to do": ``forward(session)`` returns ``session``."""

    def forward(self, session: Any) -> Any:
        return session


# --- Selector ---------------------------------------------------------------------------------


class SessionLike(Protocol):
    """What the selector uses of a ``flow.Session``."""

    @property
    def id(self) -> Any: ...

    @property
    def chunks(self) -> Sequence[Any]: ...

    def append(self, content: Any = None, **fields: Any) -> Any: ...


class SelectorReplayError(LookupError):
    """A replay has no usable recorded decision for this selection."""


@dataclass(frozen=True)
class Selection:
    """How an answer maps onto the menu; ``index`` -1 is no workflow (``EmptyWorkflow``), and
    ``fallback`` says the answer was not a usable choice."""

    index: int
    fallback: bool
    reason: str


NO_WORKFLOW = "no workflow chosen"


def _fallback(reason: str, first: str = "") -> Selection:
    return Selection(-1, True, f"{reason}; {NO_WORKFLOW}")


def _first_integer(text: str, names: Sequence[str]) -> Selection | None:
    # OpenRath reads the first integer anywhere in the answer ("I pick 1" is 1).
    found = _INTEGER_TOKEN.search(text)
    if found is None:
        return None
    index = int(found.group())
    if index == -1:
        return Selection(-1, False, "the model answered -1 (no workflow applies)")
    if 0 <= index < len(names):
        return Selection(index, False, f"the model chose index {index}")
    return None


def parse_selection(answer: str | None, names: Sequence[str]) -> Selection:
    """Read the model's answer: an index (``1``), an exact name (``research``), JSON
    ``{"choice": 1 | "research"}``, or a text whose first integer is an index; surrounding
    quotes, backticks and a final period are ignored. ``-1`` chooses no workflow; anything
    else that names no workflow (or an index off the menu) chooses none either, with
    ``fallback`` set. "No workflow" is index -1: the selector returns an ``EmptyWorkflow``."""
    first = names[0] if names else ""
    if answer is None or not answer.strip():
        return _fallback("the model gave no answer", first)
    text = answer.strip()
    candidate: Any = text
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        if "choice" not in parsed:
            return _fallback(f"the JSON answer {text!r} has no 'choice'", first)
        candidate = parsed["choice"]
    if isinstance(candidate, bool) or not isinstance(candidate, int | str):
        return _fallback(f"the answer {text!r} is not an index or a workflow name", first)
    if isinstance(candidate, str):
        cleaned = candidate.strip().rstrip(".").strip().strip("`'\"").strip()
        if cleaned in names:
            return Selection(names.index(cleaned), False, f"the model named {cleaned!r}")
        if not _INTEGER.fullmatch(cleaned):
            found = _first_integer(cleaned, names) if candidate is text else None
            if found is not None:
                return found
            return _fallback(f"the answer {text!r} is not an index or a workflow name", first)
        candidate = int(cleaned)
    if candidate == -1:
        return Selection(-1, False, "the model answered -1 (no workflow applies)")
    if not 0 <= candidate < len(names):
        return _fallback(
            f"the answer {text!r} is off the menu (indexes 0..{len(names) - 1})", first
        )
    return Selection(candidate, False, f"the model chose index {candidate}")


class _StepCounter:
    """Selections made per decision store (the runtime gives each step attempt its own store),
    so the n-th selection of a step attempt gets the key ``selector:<name>:<n>``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._without_store = 0
        self._per_store: dict[int, tuple[Any, int]] = {}

    def take(self, store: Any | None) -> int:
        with self._lock:
            if store is None:
                n = self._without_store
                self._without_store += 1
                return n
            key = id(store)
            entry = self._per_store.get(key)
            if entry is None or entry[0]() is not store:
                entry = (self._reference(store, key), 0)
            n = entry[1]
            self._per_store[key] = (entry[0], n + 1)
            return n

    def _reference(self, store: Any, key: int) -> Any:
        # A weak reference drops the entry when the store goes (no growth across steps); a
        # store that cannot be weakly referenced is held, and entries beyond 256 are dropped.
        try:
            return weakref.ref(store, lambda _ref: self._per_store.pop(key, None))
        except TypeError:
            if len(self._per_store) >= 256:
                self._per_store.pop(next(iter(self._per_store)))
            return lambda: store


class Selector(Workflow):
    """Let a model pick one of several workflows; the pick is recorded and can be replayed.

    ``selector(session)`` returns the chosen workflow (run it with ``chosen(session)``);
    ``selector.forward(session, *workflows)`` is OpenRath's form with the menu given per call.
    ``Selector(provider)`` (OpenRath's constructor) works too, with the menu given to ``forward``.
    With no usable choice (``-1``, an unusable answer, an empty menu) the result is an
    :class:`EmptyWorkflow`.
    """

    def __init__(
        self,
        workflows: Sequence[Any] | Provider = (),
        provider: Provider | None = None,
        *,
        name: str = "selector",
        instruction: str | None = None,
        select_instruction: str | None = None,
        replay: SessionLike | None = None,
        description: str = "",
        on_event: Any = None,
    ) -> None:
        super().__init__(description=description)
        if instruction is not None and select_instruction is not None:
            raise TypeError("pass instruction= or OpenRath's select_instruction=, not both")
        instruction = instruction if instruction is not None else select_instruction
        if isinstance(workflows, Provider):  # OpenRath's Selector(provider): menu per call
            if provider is not None:
                raise TypeError("Selector(workflows, provider): the workflows come first")
            provider = workflows
            workflows = ()
        if provider is not None and not isinstance(provider, Provider):
            raise TypeError(
                f"a selector's provider is a flow.Provider; got {type(provider).__name__}"
            )
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise ValueError("a selector's name is a non-empty string of at most 200 characters")
        self.workflows: tuple[Any, ...] = tuple(workflows)
        self.provider = provider
        self.name = name  # type: ignore[misc]  # a selector's name is per instance
        self.instruction = instruction if instruction is not None else DEFAULT_SELECT_INSTRUCTION
        # Accepted for OpenRath's signature: a selection is one short, unstreamed answer.
        self.on_event = on_event
        self.agent = AgentParam(agent_session=None, provider=provider)
        self.replay = replay
        self._replayed: list[dict[str, Any]] | None = None
        self._replay_position = 0
        self._counter = _StepCounter()
        self._lock = threading.Lock()
        if self.workflows:
            self._menu(self.workflows)

    def __repr__(self) -> str:
        names = [route_name(w) for w in self.workflows]
        return f"<Selector {self.name!r} menu={names} provider={self.provider!r}>"

    def __call__(self, session: SessionLike, *workflows: Any) -> Any:
        return self.forward(session, *workflows)

    def forward(self, session: SessionLike, *workflows: Any) -> Any:
        """Choose a workflow for ``session`` from ``workflows`` (default: the constructor's);
        an :class:`EmptyWorkflow` when none applies."""
        menu_items = tuple(workflows) if workflows else self.workflows
        if not menu_items and self.provider is not None:
            return EmptyWorkflow()  # OpenRath: nothing to choose from, nothing to do
        menu = self._menu(menu_items)
        names = [entry["name"] for entry in menu]
        store = context.current().decisions
        key = f"selector:{self.name}:{self._counter.take(store)}"
        usage: dict[str, Any] | None = None
        if self.replay is not None:
            decision, source = self._next_replayed(), "replay"
        else:
            recalled = store.recall(key) if store is not None else None
            if recalled is not None:
                decision, source = self._checked(recalled, key), "decision_store"
            else:
                decision, usage = self._ask(session, menu)
                source = "model"
                if store is not None:
                    store.record(key, decision)
        choice = decision["choice"]
        if choice is not None and choice not in names:  # only a reused decision can be off it
            reused = "stored" if source == "decision_store" else "replayed"
            raise SelectorReplayError(
                f"selector {self.name!r}: the {reused} decision {key!r} chose {choice!r}, "
                f"which is not on the menu {names}"
            )
        index = names.index(choice) if choice is not None else -1
        event = {
            "type": DECISION_EVENT,
            "selector": self.name,
            "menu": menu,
            "answer": decision.get("answer"),
            "choice": choice,
            "index": index,
            "fallback": bool(decision.get("fallback", False)),
            "reason": str(decision.get("reason", "")),
            "key": key,
            "source": source,
        }
        with context.writing(agent=self.name):
            session.append(event, role="assistant", kind="event", usage=usage)
        return menu_items[index] if index >= 0 else EmptyWorkflow()

    # --- internals ----------------------------------------------------------------------------

    def _menu(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        if not items:
            raise ValueError(f"selector {self.name!r} has no workflows to choose from")
        menu: list[dict[str, Any]] = [
            {
                "index": index,
                "name": route_name(item),
                "description": str(getattr(item, "description", "") or ""),
            }
            for index, item in enumerate(items)
        ]
        names = [entry["name"] for entry in menu]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"selector {self.name!r}: workflow names must be unique on the menu; "
                f"repeated: {', '.join(duplicates)}"
            )
        return menu

    def _ask(
        self, session: SessionLike, menu: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.provider is None:
            raise ValueError(f"selector {self.name!r} has no provider to ask")
        lines = [
            f"{entry['index']}. {entry['name']}"
            + (f" — {entry['description']}" if entry["description"] else "")
            for entry in menu
        ]
        question = _last_user_text(session) or "(the conversation has no user message)"
        messages = [
            {"role": "system", "content": f"{self.instruction}\n\nWorkflows:\n" + "\n".join(lines)},
            {"role": "user", "content": question},
        ]
        try:
            turn = self.provider.complete(messages)
        except ProviderError as exc:
            exc.add_note(f"in selector {self.name!r} on session {session.id}")
            raise
        names = [entry["name"] for entry in menu]
        selection = parse_selection(turn.text, names)
        decision = {
            "answer": turn.text,
            "choice": names[selection.index] if selection.index >= 0 else None,
            "index": selection.index,
            "fallback": selection.fallback,
            "reason": selection.reason,
        }
        usage = {**turn.usage.as_dict(), "model": turn.model, "provider": turn.provider}
        return decision, usage

    def _checked(self, recalled: Any, key: str) -> dict[str, Any]:
        if (
            not isinstance(recalled, dict)
            or "choice" not in recalled
            or not isinstance(recalled["choice"], str | type(None))
        ):
            raise SelectorReplayError(
                f"selector {self.name!r}: the decision store holds {recalled!r} for {key!r}, "
                "which is not a selector decision"
            )
        return recalled

    def _next_replayed(self) -> dict[str, Any]:
        with self._lock:
            if self._replayed is None:
                assert self.replay is not None
                self._replayed = [
                    dict(chunk.content)
                    for chunk in self.replay.chunks
                    if chunk.kind == "event"
                    and chunk.content.get("type") == DECISION_EVENT
                    and chunk.content.get("selector") == self.name
                ]
            position = self._replay_position
            if position >= len(self._replayed):
                raise SelectorReplayError(
                    f"selector {self.name!r}: session {self.replay.id if self.replay else '?'} "
                    f"recorded {len(self._replayed)} decision(s) of this selector; "
                    f"selection {position + 1} has none left to replay"
                )
            self._replay_position += 1
            return self._checked(self._replayed[position], f"replay #{position}")


def _last_user_text(session: SessionLike) -> str:
    last = ""
    for chunk in session.chunks:
        if chunk.role == "user" and chunk.kind == "message":
            last = str(chunk.content.get("text", ""))
    return last
