"""State deltas between checkpoints, so storage grows with what changed. Pure Python.

An **object delta** turns one JSON object into another::

    {"set": {key: value}, "del": [key], "sub": {key: object delta}, "list": {key: list delta}}

``set``: keys given a new value; ``del``: keys removed; ``sub``: object values changed in
place (recursively); ``list``: list values changed in place. Applied in that order; every part
is optional and ``{}`` changes nothing. Deltas stored before ``list`` existed have only the
first three parts and apply exactly as they always did.

A **list delta** turns one list into another::

    {"set": {"<index>": value}, "sub": {"<index>": object delta},
     "list": {"<index>": list delta}, "splice": [start, count, [item, ...]],
     "append": [item, ...]}

The element parts (``set``, ``sub``, ``list``; indices as decimal strings, JSON object keys)
change elements of the old list in place; then ``splice`` replaces ``count`` elements from
``start`` (indices of the old list: the element parts keep its length) by the items; then
``append`` adds items at the end. So ``state["messages"] = state["messages"] + [m]`` is
``{"list": {"messages": {"append": [m]}}}``, whatever the list's length.

Values compare *exactly*: ``1``, ``1.0`` and ``True`` are different values (Python's ``==``
says otherwise), as are ``0.0`` and ``-0.0``: a delta never drops a change its canonical JSON
would show. Applying the delta to the previous state gives the new one exactly;
``jsontext.digest`` checks that when a state is rebuilt.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from itertools import chain
from operator import is_
from typing import Any

from openrath_project.errors import ValidationFailed
from openrath_project.jsonlimits import MAX_VALUE_DEPTH, json_problem, string_problem
from openrath_project.jsontext import canonical, measure

JSONDict = dict[str, Any]
JSONList = list[Any]


class TrackedDict(dict[Any, Any]):
    """A flat object of a top-level list, as a step is handed it (:mod:`runs_app.state_track`):
    a ``dict`` that notes in its owner's ``changes`` (``id -> object``) when a method changes
    it, so a step that leaves it alone costs nothing to check. Copies, pickles and deep copies
    of it are plain ``dict`` objects. Changes made past its methods (``dict.__setitem__(d, ...)``
    called directly, C code writing the object's storage) are not seen."""

    __slots__ = ("changes",)
    changes: dict[int, Any] | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.changes = None  # also for one made by code of its own (``type(d)(...)``)
        dict.__init__(self, *args, **kwargs)

    def _changing(self) -> None:
        changes = self.changes
        if changes is not None:
            changes[id(self)] = self

    def __setitem__(self, key: Any, value: Any) -> None:
        self._changing()
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self._changing()
        dict.__delitem__(self, key)

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[misc]
        self._changing()
        dict.update(self, other)
        return self

    def clear(self) -> None:
        self._changing()
        dict.clear(self)

    def pop(self, *args: Any) -> Any:
        self._changing()
        return dict.pop(self, *args)

    def popitem(self) -> tuple[Any, Any]:
        self._changing()
        return dict.popitem(self)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._changing()
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changing()
        dict.update(self, *args, **kwargs)

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return dict(self)  # its values are strings, numbers, booleans and None

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (dict, (dict(self),))


#: The objects the delta functions treat as JSON objects of one kind.
_OBJECTS = frozenset({dict, TrackedDict})


class DeltaMismatch(ValueError):
    """A delta that does not fit the value it is applied to (an index out of range, a list
    delta for something that is not a list): the chain it belongs to is broken."""


def diff(old: JSONDict, new: JSONDict) -> JSONDict:
    """The object delta that turns ``old`` into ``new`` (``{}`` when they are exactly equal).

    A changed value is given in full (``set``) unless a nested delta (``sub`` for objects,
    ``list`` for lists) is shorter, in canonical JSON, than the value itself (by the length of
    the part it goes in, ``"sub":{},`` or ``"list":{},``)."""
    delta: JSONDict = {}
    sets: JSONDict = {}
    subs: JSONDict = {}
    lists: JSONDict = {}
    for key, value in new.items():
        if key not in old:
            sets[key] = value
            continue
        kind, change = _change(old[key], value)
        if kind == "sub":
            subs[key] = change
        elif kind == "list":
            lists[key] = change
        elif kind == "set":
            sets[key] = change
    removed = sorted(key for key in old if key not in new)
    if sets:
        delta["set"] = sets
    if removed:
        delta["del"] = removed
    if subs:
        delta["sub"] = subs
    if lists:
        delta["list"] = lists
    return delta


def apply(old: JSONDict, delta: JSONDict) -> JSONDict:
    """``old`` with the object delta applied (``old`` is not modified; unchanged values are
    shared with it). Raises :class:`DeltaMismatch` when a list part does not fit."""
    new = dict(old)
    for key in delta.get("del", ()):
        new.pop(key, None)
    for key, value in delta.get("set", {}).items():
        new[key] = value
    for key, nested in delta.get("sub", {}).items():
        base = new.get(key)
        # As before lists existed: a nested delta on a value that is not an object starts empty.
        new[key] = apply(base if isinstance(base, dict) else {}, nested)
    for key, nested in delta.get("list", {}).items():
        base = new.get(key)
        if not isinstance(base, list):
            raise DeltaMismatch(f"list delta for {key!r}, which is {type(base).__name__}")
        new[key] = apply_list(base, nested)
    return new


def diff_list(old: JSONList, new: JSONList) -> JSONDict:
    """The list delta that turns ``old`` into ``new`` (``{}`` when they are exactly equal).

    Linear, not a longest-common-subsequence search: the common prefix and the common suffix
    are kept, and only the middle between them is encoded, the smaller of (a) one ``splice``
    replacing the old middle by the new one and (b) the two middles paired element by element
    from their start (each pair as a nested delta or a new value) plus a ``splice`` of what one
    middle has beyond the other. An addition at the end is an ``append``. So appends, inserts
    and removals of one run of elements, and changes inside elements, cost what they change;
    edits at several places cost the span between the first and the last."""
    old_len, new_len = len(old), len(new)
    if new_len >= old_len and _exactly_equal(old, new[:old_len] if new_len > old_len else new):
        # The common case, at C speed: the list is as it was, or grew at the end.
        return {"append": new[old_len:]} if new_len > old_len else {}
    prefix, shorter = 0, min(old_len, new_len)
    while prefix < shorter and _same(old[prefix], new[prefix]):
        prefix += 1
    suffix, room = 0, shorter - prefix
    while suffix < room and _same(old[old_len - 1 - suffix], new[new_len - 1 - suffix]):
        suffix += 1
    old_mid = old[prefix : old_len - suffix]
    new_mid = new[prefix : new_len - suffix]
    if not old_mid and not new_mid:
        return {}
    plain = _replace(prefix, len(old_mid), new_mid, at_end=suffix == 0)
    if not old_mid or not new_mid:
        return plain
    paired: JSONDict = {}
    for offset, (before, after) in enumerate(zip(old_mid, new_mid, strict=False)):
        kind, change = _change(before, after)
        if kind:
            paired.setdefault(kind, {})[str(prefix + offset)] = change
    paired_len = min(len(old_mid), len(new_mid))
    paired.update(
        _replace(
            prefix + paired_len,
            len(old_mid) - paired_len,
            new_mid[paired_len:],
            at_end=suffix == 0,
        )
    )
    return paired if len(canonical(paired)) < len(canonical(plain)) else plain


def apply_list(old: JSONList, delta: JSONDict) -> JSONList:
    """``old`` with the list delta applied (``old`` is not modified). Raises
    :class:`DeltaMismatch` when an index or the splice is outside the list."""
    new = list(old)
    for part in ("set", "sub", "list"):
        for key, change in delta.get(part, {}).items():
            index = _index(key, len(new))
            if part == "set":
                new[index] = change
            elif part == "sub":
                base = new[index]
                if not isinstance(base, dict):
                    raise DeltaMismatch(f"object delta for element {index}, not an object")
                new[index] = apply(base, change)
            else:
                base = new[index]
                if not isinstance(base, list):
                    raise DeltaMismatch(f"list delta for element {index}, not a list")
                new[index] = apply_list(base, change)
    if "splice" in delta:
        start, count, items = delta["splice"]
        if not (
            type(start) is int
            and type(count) is int
            and isinstance(items, list)
            and 0 <= start <= len(new)
            and 0 <= count <= len(new) - start
        ):
            raise DeltaMismatch(f"splice {start}+{count} outside a list of {len(new)}")
        new[start : start + count] = items
    new.extend(delta.get("append", ()))
    return new


def _change(old: Any, new: Any) -> tuple[str, Any]:
    """How a value changed: ``("", None)`` not at all, ``("sub", object delta)``,
    ``("list", list delta)`` or ``("set", new)``, whichever is shortest."""
    old_type = type(old)
    if old_type in _OBJECTS and type(new) in _OBJECTS:
        nested = diff(old, new)
        kind = "sub"
    elif old_type is list and type(new) is list:
        nested = diff_list(old, new)
        kind = "list"
    else:
        return ("", None) if _same(old, new) else ("set", new)
    if not nested:
        return "", None
    # A nested delta only pays when it is shorter than the value itself, counting the part
    # it goes in (`"list":{},`): else a small list's append would make the whole delta longer.
    limit = len(canonical(nested)) + len(kind) + 6
    return (kind, nested) if measure(new, limit) > limit else ("set", new)


def _replace(start: int, count: int, items: JSONList, *, at_end: bool) -> JSONDict:
    """The list delta part replacing ``count`` elements from ``start`` by ``items``."""
    if not items and not count:
        return {}
    if at_end and not count:
        return {"append": items}
    return {"splice": [start, count, items]}


def _index(key: str, length: int) -> int:
    if not (isinstance(key, str) and key.isascii() and key.isdigit() and int(key) < length):
        raise DeltaMismatch(f"element {key!r} outside a list of {length}")
    return int(key)


def _exactly_equal(a: JSONList, b: JSONList) -> bool | None:
    """Whether two lists are exactly equal (:func:`_same`), decided at C speed where that can
    be done: ``True`` when they hold the same objects, ``False`` when ``==`` says they differ
    (exactly equal values are equal), ``True`` when they are equal and ``b`` holds flat objects
    of the same types (:func:`_flat_members`) or they are also pickled alike (pickle writes
    ``True``, ``1`` and ``1.0`` apart, and ``-0.0`` as itself), ``None`` when only the element
    walk can tell (keys in another order, objects shared differently, values that are not plain
    JSON)."""
    if len(a) == len(b) and all(map(is_, a, b)):
        return True  # the same objects (a stored tail carried on)
    try:
        if a != b:
            return False
        if _flat_members(a, b):
            return True
        return True if pickle.dumps(a, 5) == pickle.dumps(b, 5) else None
    except Exception:  # noqa: BLE001 - not JSON: let the walk (and the state check) decide
        return None


def _flat_members(a: JSONList, b: JSONList) -> bool:
    """For ``a == b`` (``a`` JSON): whether they are also exactly equal because every element of
    ``b`` is a ``dict`` (exactly, or a :class:`TrackedDict`) of ``str`` keys (exactly) and
    values that are ``str``, ``None``, ``int`` or ``bool`` (exactly), with, when any is a
    number, the same keys in the same order and values of the same types as ``a``'s, key by
    key. A JSON value equal to a string is that string; only numbers compare equal across types
    (floats are left to the pickled comparison, for ``0.0 == -0.0``). Flat messages pass it at C
    speed, a few passes over their keys and values, without the pickling
    :func:`_exactly_equal` falls back to."""
    if not set(map(type, b)) <= _OBJECTS or set(map(type, chain.from_iterable(b))) != _STR_ONLY:
        return False
    kinds = set(map(type, chain.from_iterable(map(dict.values, b))))
    if kinds <= _TEXT_OR_NONE:
        return True
    if not kinds <= _FLAT_EXACT:
        return False
    return list(chain.from_iterable(a)) == list(chain.from_iterable(b)) and list(
        map(type, chain.from_iterable(map(dict.values, a)))
    ) == list(map(type, chain.from_iterable(map(dict.values, b))))


_STR_ONLY = {str}
_TEXT_OR_NONE = {str, type(None)}
_FLAT_EXACT = {str, type(None), int, bool}


def _same(a: Any, b: Any) -> bool:
    """Exact equality of JSON values: equal, and of the same types all the way down (so that
    their canonical JSON is the same text; the order of object keys does not matter)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        if kind not in _OBJECTS or type(b) not in _OBJECTS:
            return False
        kind = dict
    if kind is dict or kind is TrackedDict:
        if len(a) != len(b):
            return False
        # A loop with the common scalars inline: the prefix walk of a long list of messages
        # is most of a step's diff (2.5x faster than all() and a call per value).
        for key, value in a.items():
            other = b.get(key, _MISSING)
            value_type = type(value)
            if value_type is not type(other):
                return False
            if value_type is str or value_type is int or value_type is bool:
                if value != other:
                    return False
            elif not _same(value, other):
                return False
        return True
    if kind is list:
        if len(a) != len(b):
            return False
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if kind is float:
        return repr(a) == repr(b)  # 0.0 and -0.0 are equal but print apart
    return bool(a == b)


_MISSING = object()


class StateInvalid(ValidationFailed, TypeError):
    """A state that may not be stored. A ``ValidationFailed`` (400 for a client's state) and a
    ``TypeError`` (a step that returns one fails, as for any state that is not JSON)."""


#: The key of the references the product writes for large values (``large_values``). Nothing
#: else may write one: a state naming another project's digest would read its bytes.
RESERVED_KEY = "$artifact"


def _reserved_path(value: Any, where: str) -> str | None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            if RESERVED_KEY in item:
                return f"{path}.{RESERVED_KEY}"
            stack.extend((child, f"{path}.{key}") for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None


def check_json_state(state: Any, *, where: str = "state") -> JSONDict:
    """A new state (a client's initial state, or what a step returned) must be a JSON object
    of values in the JSON domain (:mod:`openrath_project.jsonlimits`: nesting, 64-bit
    integers, finite numbers, text PostgreSQL can store) without the reserved key
    ``"$artifact"`` at any depth. Returns a fresh copy; raises :class:`StateInvalid`."""
    if not isinstance(state, dict):
        raise StateInvalid(
            f"{where} must be a dict (a JSON object), got {type(state).__name__}",
            details={"state": ["must be a JSON object"]},
        )
    problem = json_problem(state, root="state")
    if problem is not None:
        raise StateInvalid(
            f"{where} is not storable: {problem.text()}", details={"state": [problem.text()]}
        )
    reserved = _reserved_path(state, "state")
    if reserved is not None:
        message = (
            f'"{RESERVED_KEY}" is reserved for the references the product writes (at {reserved})'
        )
        raise StateInvalid(f"{where}: {message}", details={"state": [message]})
    try:
        text = json.dumps(state, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StateInvalid(
            f"{where} must be JSON-compatible: {exc}",
            details={"state": ["must be JSON-compatible"]},
        ) from exc
    loaded: JSONDict = json.loads(text)
    return loaded


def check_json_change(
    old: JSONDict,
    new: Any,
    *,
    where: str = "state",
    appended: Mapping[str, JSONList] | None = None,
) -> JSONDict:
    """The delta from ``old`` (a state checked before) to ``new``, checked as
    :func:`check_json_state` checks a whole state, but only where it changed: the values the
    delta sets, inserts or appends, each at its depth in the new state. Costs what changed, not
    the state's size. The delta's new values are fresh JSON (a tuple becomes a list), so
    ``apply(old, result)`` is exactly what :func:`check_json_state` returns for ``new``; raises
    :class:`StateInvalid` as it does.

    ``appended``: keys whose list in ``new`` the caller knows to be ``old``'s (its very
    elements) followed by these items; their start is not compared again."""
    if not isinstance(new, dict):
        raise StateInvalid(
            f"{where} must be a dict (a JSON object), got {type(new).__name__}",
            details={"state": ["must be a JSON object"]},
        )
    try:
        if appended:
            new = {**new, **{key: old[key] for key in appended}}
        delta = diff(old, new)
        for key, items in (appended or {}).items():
            _append_change(delta, key, old[key], items)
        problem = _object_change_problem(delta, old, "state", 1)
        if problem is None:
            text = json.dumps(delta, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StateInvalid(
            f"{where} must be JSON-compatible: {exc}",
            details={"state": ["must be JSON-compatible"]},
        ) from exc
    if problem is not None:
        suffix, detail = problem
        raise StateInvalid(f"{where}{suffix}", details={"state": [detail]})
    loaded: JSONDict = json.loads(text)
    return loaded


def _append_change(delta: JSONDict, key: str, before: JSONList, items: JSONList) -> None:
    """Put into ``delta`` the change of ``key`` from ``before`` to ``before + items``, as
    :func:`_change` would: an append, or the whole new list when that is shorter."""
    if not items:
        return
    nested = {"append": items}
    limit = len(canonical(nested)) + len("list") + 6
    if measure(before, limit) > limit:  # the new list is longer still
        delta.setdefault("list", {})[key] = nested
        return
    whole = before + items
    if measure(whole, limit) > limit:
        delta.setdefault("list", {})[key] = nested
    else:
        delta.setdefault("set", {})[key] = whole


#: Why a change cannot be stored: the end of the message after ``where``, and the detail.
_Problem = tuple[str, str]


def _not_storable(text: str) -> _Problem:
    return f" is not storable: {text}", text


def _reserved(at: str) -> _Problem:
    message = f'"{RESERVED_KEY}" is reserved for the references the product writes (at {at})'
    return f": {message}", message


def _value_problem(value: Any, path: str, depth: int) -> _Problem | None:
    """Why a new value at ``path`` (inside ``depth`` containers) cannot be stored, or None."""
    problem = json_problem(value, root=path, max_depth=MAX_VALUE_DEPTH - depth)
    if problem is not None:
        return _not_storable(problem.text())
    reserved = _reserved_path(value, path)
    return None if reserved is None else _reserved(reserved)


def _key_problem(key: Any, path: str) -> _Problem | None:
    if isinstance(key, str):
        message = string_problem(key)
        if message is not None:
            return _not_storable(f"{message} (at {path} (a key))")
        if key == RESERVED_KEY:
            return _reserved(f"{path}.{RESERVED_KEY}")
    return None


def _object_change_problem(delta: JSONDict, old: Any, path: str, depth: int) -> _Problem | None:
    old = old if isinstance(old, dict) else {}
    for part in ("set", "sub", "list"):
        for key, change in delta.get(part, {}).items():
            problem = _key_problem(key, path)
            if problem is None:
                child = f"{path}.{key}"
                if part == "set":
                    problem = _value_problem(change, child, depth)
                elif part == "sub":
                    problem = _object_change_problem(change, old.get(key), child, depth + 1)
                else:
                    problem = _list_change_problem(change, old.get(key), child, depth + 1)
            if problem is not None:
                return problem
    return None


def _list_change_problem(delta: JSONDict, old: Any, path: str, depth: int) -> _Problem | None:
    old = old if isinstance(old, list) else []
    for part in ("set", "sub", "list"):
        for key, change in delta.get(part, {}).items():
            child = f"{path}[{key}]"
            base = old[int(key)] if key.isdigit() and int(key) < len(old) else None
            if part == "set":
                problem = _value_problem(change, child, depth)
            elif part == "sub":
                problem = _object_change_problem(change, base, child, depth + 1)
            else:
                problem = _list_change_problem(change, base, child, depth + 1)
            if problem is not None:
                return problem
    length = len(old)
    if "splice" in delta:
        start, count, items = delta["splice"]
        for offset, item in enumerate(items):
            problem = _value_problem(item, f"{path}[{start + offset}]", depth)
            if problem is not None:
                return problem
        length += len(items) - count
    for offset, item in enumerate(delta.get("append", ())):
        problem = _value_problem(item, f"{path}[{length + offset}]", depth)
        if problem is not None:
            return problem
    return None
