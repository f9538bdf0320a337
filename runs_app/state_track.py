"""A worker's view of a run's state between steps, so that a step costs what it changed.

Three forms of the state are kept for one claim:

* ``stored``: as the next step's checkpoint will store it (large values as references,
  :mod:`openrath_project.large_values`);
* ``committed``: the stored form at the run's last checkpoint, which the next checkpoint's
  delta is taken from (a step declared ``checkpoint=False`` moves ``stored`` but not this);
* a private snapshot of ``stored`` with the references resolved, read from the artifact store
  once per claim, never handed to a step.

A step is handed a fresh copy of the snapshot (:meth:`StateTrack.working_copy`): new containers
all the way down (so it may mutate any of them), around the snapshot's own strings, numbers,
booleans and ``None``, which cannot change. Copying costs a C-speed call per container, not a
pass over the state's bytes: a list of flat messages is copied by ``dict`` per message, the way
of each element (share, ``dict``, or a ``marshal`` copy for nested ones) kept per list and
extended by what a step appends. What the step returns is compared with the snapshot and only
what changed is checked (:func:`state_delta.check_json_change`): the messages it carried on
untouched still hold the snapshot's key and value objects, which
:func:`state_delta._same_members` sees at C speed without reading them; anything mutated,
rebuilt or reordered is compared exactly, value by value. Only the changed keys are offloaded.
The new snapshot is the old one with the checked delta applied, so it shares nothing mutable
with the step.
"""

from __future__ import annotations

import marshal
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import call
from typing import Any

from openrath_project import large_values
from runs_app.state_delta import apply, check_json_change

State = dict[str, Any]
#: How to copy each element of a list: the element's own type for a string, number or boolean
#: (``str(s) is s`` for an exact ``str``, and so on), ``dict`` for an object of such values,
#: else a marshal copy.
Copiers = list[Callable[[Any], Any]]

_LEAVES = frozenset({str, int, float, bool, type(None)})


def _keep(value: Any) -> Any:
    return value


def _deep(value: Any) -> Any:
    # The bytes are our own, made from the snapshot the moment before: nothing untrusted.
    return marshal.loads(marshal.dumps(value))  # noqa: S302


def copier(value: Any) -> Callable[[Any], Any]:
    """The cheapest way to make a copy of ``value`` that shares nothing mutable with it."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool:
        return kind
    if value is None:
        return _keep
    if kind is dict and all(type(item) in _LEAVES for item in value.values()):
        return dict
    return _deep


@dataclass(frozen=True)
class StateChange:
    """What a step's returned state is, checked: the new snapshot and its stored form."""

    snapshot: State
    stored: State
    #: For the snapshot's top-level lists: the list and how to copy each of its elements.
    copiers: dict[str, tuple[list[Any], Copiers]] = field(default_factory=dict)


class StateTrack:
    def __init__(
        self, tenant_id: uuid.UUID | str, stored: State, *, committed: State | None = None
    ) -> None:
        self.tenant_id = tenant_id
        self.stored = stored
        self.committed = stored if committed is None else committed
        self._snapshot: State | None = None
        self._copiers: dict[str, tuple[list[Any], Copiers]] = {}

    def _hydrated(self) -> State:
        if self._snapshot is None:
            self._snapshot = large_values.hydrate(self.tenant_id, self.stored)
        return self._snapshot

    def working_copy(self) -> State:
        """A fresh copy of the state with every large value read back, for a step to use (and
        mutate) as it likes: every container in it is new; strings, numbers, booleans and
        ``None`` are the snapshot's own (they cannot change)."""
        copy: State = {}
        for key, value in self._hydrated().items():
            if type(value) is list:
                copy[key] = list(map(call, self._list_copiers(key, value), value))
            else:
                copy[key] = copier(value)(value)
        return copy

    def _list_copiers(self, key: str, value: list[Any]) -> Copiers:
        cached = self._copiers.get(key)
        if cached is not None and cached[0] is value:
            return cached[1]
        copiers = [copier(item) for item in value]
        self._copiers[key] = (value, copiers)
        return copiers

    def change(self, returned: Any, *, where: str) -> StateChange:
        """Check the state a step returned (``StateInvalid`` as for a whole state) and make its
        stored form, looking only at what changed."""
        snapshot = self._hydrated()
        delta = check_json_change(snapshot, returned, where=where)
        new_snapshot = apply(snapshot, delta)
        lists = delta.get("list", {})
        stored = large_values.offload(
            self.tenant_id,
            new_snapshot,
            before=self.stored,
            changed={*delta.get("set", ()), *delta.get("sub", ()), *lists},
            appended={
                key: len(change["append"])
                for key, change in lists.items()
                if change.keys() == {"append"}
            },
        )
        copiers = {}
        for key, (listed, known) in self._copiers.items():
            now = new_snapshot.get(key)
            if now is listed:
                copiers[key] = (listed, known)
            elif type(now) is list and lists.get(key, {}).keys() == {"append"}:
                gained = now[len(listed) :]
                copiers[key] = (now, [*known, *map(copier, gained)])
        return StateChange(snapshot=new_snapshot, stored=stored, copiers=copiers)

    def advance(self, change: StateChange, *, committed: bool) -> None:
        """The step's state is the run's now (and its last checkpoint's, if ``committed``)."""
        self.stored, self._snapshot = change.stored, change.snapshot
        self._copiers = dict(change.copiers)
        if committed:
            self.committed = change.stored

    def checkpointed(self) -> None:
        """A checkpoint stored the current state (a router's decision, which changes none)."""
        self.committed = self.stored
