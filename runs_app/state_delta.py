"""State deltas between checkpoints, so storage grows with what changed. Pure Python.

A delta is ``{"set": {key: value}, "del": [key], "sub": {key: delta}}``: top-level keys set to
a new value, keys removed, and nested objects changed in place (recursively). Applying the
delta to the previous state gives the new one exactly; ``digest`` checks that.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

JSONDict = dict[str, Any]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(state: Any) -> str:
    return hashlib.sha256(canonical(state).encode()).hexdigest()


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


def check_json_state(state: Any, *, where: str = "state") -> JSONDict:
    """A step's new state must be a JSON object of JSON values (it is stored and compared)."""
    if not isinstance(state, dict):
        raise TypeError(f"{where} must be a dict (a JSON object), got {type(state).__name__}")
    try:
        text = json.dumps(state, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where} must be JSON-compatible: {exc}") from exc
    loaded: JSONDict = json.loads(text)
    return loaded
