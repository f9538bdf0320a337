"""A worker's view of a run's state between steps, so that a step costs what it changed.

Three forms of the state are kept for one claim:

* ``stored``: as the next step's checkpoint will store it (large values as references,
  :mod:`openrath_project.large_values`);
* ``committed``: the stored form at the run's last checkpoint, which the next checkpoint's
  delta is taken from (a step declared ``checkpoint=False`` moves ``stored`` but not this);
* a private snapshot of ``stored`` with the references resolved, read from the artifact store
  once per claim, never handed to a step.

A step is handed a working copy (:meth:`StateTrack.working_copy`) that shares nothing mutable
with the snapshot. For each top-level list it is a new list of what the track keeps beside the
snapshot's list, element by element:

* a string, number, boolean or ``None``: the snapshot's own object (it cannot change);
* a flat object (a ``dict`` of such values, a message): a :class:`~runs_app.state_delta.
  TrackedDict` copy of it, made once when it entered the state and handed to every step after,
  which notes when one of its methods changes it;
* anything else: a fresh copy at each step (``marshal``).

So handing a list of messages costs a copy of the list of pointers, not of the messages, and
checking what the step returns costs what it changed: when the returned list starts with the
very objects handed and none of them noted a change, its prefix is the snapshot's list and
only what follows is checked (:func:`state_delta.check_json_change`). Anything mutated,
replaced or reordered is compared exactly, value by value. A message the step changed is let
go (it no longer notes anything) and a fresh copy is handed from then on; so is one changed
between steps, by code that kept it: the next step sees the state as it was stored. One kept
from an earlier step and changed during a later one is the later step's change.

Only the changed keys are offloaded, and the stored form's canonical text is kept beside it
and extended by what a step appended (:class:`StoredText`), so a checkpoint's digest does not
re-encode the inline tail of a long list at every step.
"""

from __future__ import annotations

import marshal
import uuid
from dataclasses import dataclass, field
from operator import is_
from typing import Any

from openrath_project import large_values
from openrath_project.jsontext import canonical
from runs_app.state_delta import TrackedDict, apply, check_json_change

State = dict[str, Any]

_LEAVES = frozenset({str, int, float, bool, type(None)})
#: In a handed list: an element copied afresh for every step (not a leaf, not a flat object).
_COPY = object()


def _deep(value: Any) -> Any:
    # The bytes are our own, made from the snapshot the moment before: nothing untrusted.
    return marshal.loads(marshal.dumps(value))  # noqa: S302


def _copy(value: Any) -> Any:
    """A copy of ``value`` that shares nothing mutable with it (a top-level value not a list)."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is dict and all(type(item) in _LEAVES for item in value.values()):
        return dict(value)
    return _deep(value)


@dataclass
class Handed:
    """What a step is handed for one top-level list of the snapshot (``source``): per element,
    the object handed every time (a leaf, or a ``TrackedDict`` noting into ``changes``), or
    ``_COPY``; ``copied`` counts the latter."""

    source: list[Any]
    objects: list[Any]
    copied: int
    #: With copies: the elements last handed (the copies among them are made per step).
    last: list[Any] | None = None

    @classmethod
    def of(cls, source: list[Any], changes: dict[int, Any]) -> Handed:
        handed = cls(source, [], 0)
        handed.extend(source, changes)
        return handed

    def extend(self, items: list[Any], changes: dict[int, Any]) -> None:
        for item in items:
            kind = type(item)
            if kind in _LEAVES:
                self.objects.append(item)
            elif kind is dict and all(type(value) in _LEAVES for value in item.values()):
                tracked = TrackedDict(item)
                tracked.changes = changes
                self.objects.append(tracked)
            else:
                self.objects.append(_COPY)
                self.copied += 1

    def let_go(self) -> None:
        """Its objects note nothing any more (a step may still hold them)."""
        for item in self.objects:
            if type(item) is TrackedDict:
                item.changes = None

    def given(self) -> list[Any]:
        """The list a step is handed."""
        if not self.copied:
            return list(self.objects)
        given = [
            _deep(item) if handed is _COPY else handed
            for handed, item in zip(self.objects, self.source, strict=True)
        ]
        self.last = list(given)
        return given

    def handed(self) -> list[Any]:
        """The elements the last :meth:`given` list held."""
        return self.objects if not self.copied or self.last is None else self.last


@dataclass(frozen=True)
class StoredText:
    """The canonical text of a stored state, per top-level value (by identity), so a stored
    form that differs from the last one in a few values, or in a list grown at the end, is
    encoded in what changed."""

    values: dict[str, tuple[Any, str]]

    @classmethod
    def of(cls, stored: State, before: StoredText | None, appended: dict[str, int]) -> StoredText:
        values: dict[str, tuple[Any, str]] = {}
        for key, value in stored.items():
            known = before.values.get(key) if before is not None else None
            if known is not None and known[0] is value:
                values[key] = known
                continue
            text = None
            if known is not None and key in appended:
                text = _appended_text(known[0], known[1], value, appended[key])
            values[key] = (value, canonical(value) if text is None else text)
        return cls(values)

    def text(self) -> str:
        # As json.dumps(sort_keys=True) composes it: members in key order, no spaces.
        members = (f"{canonical(key)}:{self.values[key][1]}" for key in sorted(self.values))
        return "{" + ",".join(members) + "}"


def _tail_of(value: Any) -> tuple[list[Any], str] | None:
    """The list a stored value grows at, and the text after that list in the value's canonical
    text: the value itself (``]`` ends it) or a list reference's tail (``]}}``)."""
    if type(value) is list:
        return value, ""
    if large_values.is_ref(value) and "tail" in value[large_values.REF_KEY]:
        return value[large_values.REF_KEY]["tail"], "}}"
    return None


def _appended_text(old: Any, old_text: str, new: Any, count: int) -> str | None:
    """The canonical text of ``new``, a stored value that is ``old`` with ``count`` items
    appended to its list (or to its reference's tail, no block sealed), from ``old``'s text;
    None when it is not that (then it is encoded whole)."""
    before, after = _tail_of(old), _tail_of(new)
    if before is None or after is None or before[1] != after[1]:
        return None
    old_items, new_items = before[0], after[0]
    if len(new_items) != len(old_items) + count or not all(map(is_, old_items, new_items)):
        return None
    if after[1] and old[large_values.REF_KEY]["blocks"] != new[large_values.REF_KEY]["blocks"]:
        return None
    end = len(old_text) - len(after[1]) - 1  # the list's closing "]"
    gained = ",".join(canonical(item) for item in new_items[len(old_items) :])
    if not gained:
        return old_text
    return f"{old_text[:end]}{',' if old_items else ''}{gained}]{after[1]}"


@dataclass(frozen=True)
class StateChange:
    """What a step's returned state is, checked: the new snapshot and its stored form."""

    snapshot: State
    stored: State
    #: The canonical text of ``stored``, by value.
    stored_text: StoredText
    #: What the next step is handed for the snapshot's top-level lists.
    handed: dict[str, Handed] = field(default_factory=dict)
    #: The handed lists no longer of the state, to let go of.
    dropped: list[Handed] = field(default_factory=list)
    tails: dict[str, tuple[list[Any], int]] = field(default_factory=dict)

    def text(self) -> str:
        """``canonical(self.stored)``."""
        return self.stored_text.text()


class StateTrack:
    def __init__(
        self, tenant_id: uuid.UUID | str, stored: State, *, committed: State | None = None
    ) -> None:
        self.tenant_id = tenant_id
        self.stored = stored
        self.committed = stored if committed is None else committed
        self._snapshot: State | None = None
        self._handed: dict[str, Handed] = {}
        #: The handed objects changed through their methods since the last step's check.
        self._changes: dict[int, Any] = {}
        self._stored_text: StoredText | None = None
        #: Per key, a stored list reference's tail and its size (``large_values.offload``).
        self._tails: dict[str, tuple[list[Any], int]] = {}

    def _hydrated(self) -> State:
        if self._snapshot is None:
            self._snapshot = large_values.hydrate(self.tenant_id, self.stored)
        return self._snapshot

    def stored_text(self) -> str:
        """``canonical(self.stored)``, encoded in what changed since the last time."""
        if self._stored_text is None:
            self._stored_text = StoredText.of(self.stored, None, {})
        return self._stored_text.text()

    def working_copy(self) -> State:
        """A copy of the state with every large value read back, for a step to use (and mutate)
        as it likes: nothing mutable in it is the snapshot's."""
        if self._changes:  # changed between steps by code that kept them: hand fresh ones
            self._forget(self._handed)
            self._handed = {}
        copy: State = {}
        for key, value in self._hydrated().items():
            if type(value) is list:
                copy[key] = self._handed_for(key, value).given()
            else:
                copy[key] = _copy(value)
        return copy

    def _handed_for(self, key: str, value: list[Any]) -> Handed:
        handed = self._handed.get(key)
        if handed is None or handed.source is not value:
            if handed is not None:
                handed.let_go()
            handed = self._handed[key] = Handed.of(value, self._changes)
        return handed

    def _forget(self, handed: dict[str, Handed]) -> None:
        for each in handed.values():
            each.let_go()
        for item in self._changes.values():
            item.changes = None
        self._changes.clear()

    def _as_snapshot(self, returned: State) -> tuple[State, dict[str, list[Any]]]:
        """``returned`` with the handed objects it carries on unchanged put back as the
        snapshot's own, so that comparing it with the snapshot sees them by identity; and the
        keys whose list is the snapshot's followed by new items, with those items."""
        snapshot = self._hydrated()
        changed = self._changes
        out = returned
        appended: dict[str, list[Any]] = {}
        for key, handed in self._handed.items():
            value = returned.get(key)
            source = snapshot.get(key)
            if type(value) is not list or handed.source is not source:
                continue
            count = len(source)
            if not changed and len(value) >= count and all(map(is_, handed.handed(), value)):
                if not handed.copied:  # the snapshot's list, then what the step added
                    appended[key] = value[count:]
                    continue
                # Fresh copies handed: those are compared with the snapshot's exactly.
                prefix = [
                    mine if given is not _COPY else theirs
                    for mine, given, theirs in zip(source, handed.objects, value, strict=False)
                ]
                rebuilt = prefix + value[count:]
            else:
                back = {
                    id(given): mine
                    for given, mine in zip(handed.objects, source, strict=True)
                    if given is not _COPY and id(given) not in changed
                }
                rebuilt = [back.get(id(item), item) for item in value]
            if out is returned:
                out = dict(returned)
            out[key] = rebuilt
        return out, appended

    def change(self, returned: Any, *, where: str) -> StateChange:
        """Check the state a step returned (``StateInvalid`` as for a whole state) and make its
        stored form, looking only at what changed."""
        snapshot = self._hydrated()
        appended: dict[str, list[Any]] = {}
        compared = returned
        if isinstance(returned, dict):
            compared, appended = self._as_snapshot(returned)
        delta = check_json_change(snapshot, compared, where=where, appended=appended)
        new_snapshot = apply(snapshot, delta)
        lists = delta.get("list", {})
        grew = {key: len(one["append"]) for key, one in lists.items() if one.keys() == {"append"}}
        known = self._stored_text.values if self._stored_text is not None else {}
        tails = dict(self._tails)
        stored = large_values.offload(
            self.tenant_id,
            new_snapshot,
            before=self.stored,
            changed={*delta.get("set", ()), *delta.get("sub", ()), *lists},
            appended=grew,
            lengths={
                key: len(text) for key, (was, text) in known.items() if self.stored.get(key) is was
            },
            tails=tails,
        )
        handed: dict[str, Handed] = {}
        dropped: list[Handed] = []
        for key, each in self._handed.items():
            now = new_snapshot.get(key)
            if now is each.source:
                handed[key] = each
            elif type(now) is list and key in grew and not self._changes:
                grown = Handed(now, list(each.objects), each.copied, each.last)
                grown.extend(now[len(each.source) :], self._changes)
                handed[key] = grown
            else:
                dropped.append(each)
        return StateChange(
            snapshot=new_snapshot,
            stored=stored,
            handed=handed,
            dropped=dropped,
            stored_text=StoredText.of(stored, self._stored_text, grew),
            tails=tails,
        )

    def advance(self, change: StateChange, *, committed: bool) -> None:
        """The step's state is the run's now (and its last checkpoint's, if ``committed``)."""
        self.stored, self._snapshot = change.stored, change.snapshot
        for each in change.dropped:
            each.let_go()
        if self._changes:  # changed by the step: the next is handed new ones
            self._forget(change.handed)
            self._handed = {}
        else:
            self._handed = dict(change.handed)
        self._stored_text, self._tails = change.stored_text, change.tails
        if committed:
            self.committed = change.stored

    def checkpointed(self) -> None:
        """A checkpoint stored the current state (a router's decision, which changes none)."""
        self.committed = self.stored
