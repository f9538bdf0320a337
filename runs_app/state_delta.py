"""State deltas between checkpoints, so storage grows with what changed. Pure Python.

A delta is ``{"set": {key: value}, "del": [key], "sub": {key: delta}}``: top-level keys set to
a new value, keys removed, and nested objects changed in place (recursively). Applying the
delta to the previous state gives the new one exactly; ``jsontext.digest`` checks that.
"""

from __future__ import annotations

import json
from typing import Any

from openrath_project.errors import ValidationFailed
from openrath_project.jsonlimits import json_problem
from openrath_project.jsontext import canonical

JSONDict = dict[str, Any]


def diff(old: JSONDict, new: JSONDict) -> JSONDict:
    """The delta that turns ``old`` into ``new`` (empty dict when they are equal)."""
    delta: JSONDict = {}
    sets: JSONDict = {}
    subs: JSONDict = {}
    for key, value in new.items():
        if key not in old:
            sets[key] = value
            continue
        previous = old[key]
        if previous == value and type(previous) is type(value):
            continue
        if isinstance(previous, dict) and isinstance(value, dict):
            nested = diff(previous, value)
            # A nested delta only pays when it is smaller than the value itself.
            if len(canonical(nested)) < len(canonical(value)):
                subs[key] = nested
                continue
        sets[key] = value
    removed = sorted(key for key in old if key not in new)
    if sets:
        delta["set"] = sets
    if removed:
        delta["del"] = removed
    if subs:
        delta["sub"] = subs
    return delta


def apply(old: JSONDict, delta: JSONDict) -> JSONDict:
    """``old`` with ``delta`` applied (``old`` is not modified)."""
    new = dict(old)
    for key in delta.get("del", ()):
        new.pop(key, None)
    for key, value in delta.get("set", {}).items():
        new[key] = value
    for key, nested in delta.get("sub", {}).items():
        base = new.get(key)
        new[key] = apply(base if isinstance(base, dict) else {}, nested)
    return new


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
