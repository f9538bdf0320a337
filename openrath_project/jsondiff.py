"""A readable difference between two JSON values, for people: reviews, replays, compares.

:func:`json_diff` lists the changes that turn ``old`` into ``new`` as operations on RFC 6901
paths (``/messages/3/content``): ``add`` (``new`` only), ``remove`` (``old`` only) and
``replace`` (both). Objects are compared key by key, lists index by index (an appended item is
one ``add`` at its index, a removed tail one ``remove`` per item), anything else by value with
JSON's types kept apart (``1``, ``1.0`` and ``true`` differ). The storage format of checkpoint
deltas (``runs_app.state_delta``) is a different thing: compact and exact, not meant to be read.

Pure Python, no Django import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Change", "json_diff", "pointer"]


@dataclass(frozen=True)
class Change:
    """One difference: ``op`` at ``path``, with the values on each side (absent: ``None``)."""

    op: str
    path: str
    old: Any = None
    new: Any = None

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"op": self.op, "path": self.path}
        if self.op != "add":
            body["old"] = self.old
        if self.op != "remove":
            body["new"] = self.new
        return body


def pointer(parts: list[str | int]) -> str:
    """The RFC 6901 JSON Pointer of ``parts`` (``~`` and ``/`` escaped); ``""`` is the root."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def json_diff(old: Any, new: Any, *, limit: int = 500) -> list[dict[str, Any]]:
    """The changes from ``old`` to ``new`` (at most ``limit`` of them, in document order), each
    ``{"op", "path", "old"?, "new"?}``; ``[]`` when they are the same JSON value."""
    changes: list[Change] = []
    _walk(old, new, [], changes, limit)
    return [change.as_dict() for change in changes]


def _same_scalar(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _walk(old: Any, new: Any, at: list[str | int], out: list[Change], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                out.append(Change("remove", pointer([*at, key]), old=old[key]))
            else:
                _walk(old[key], new[key], [*at, key], out, limit)
            if len(out) >= limit:
                return
        for key in new:
            if key not in old:
                out.append(Change("add", pointer([*at, key]), new=new[key]))
                if len(out) >= limit:
                    return
        return
    if isinstance(old, list) and isinstance(new, list):
        common = min(len(old), len(new))
        for index in range(common):
            _walk(old[index], new[index], [*at, index], out, limit)
            if len(out) >= limit:
                return
        for index in range(common, len(old)):
            out.append(Change("remove", pointer([*at, index]), old=old[index]))
            if len(out) >= limit:
                return
        for index in range(common, len(new)):
            out.append(Change("add", pointer([*at, index]), new=new[index]))
            if len(out) >= limit:
                return
        return
    if isinstance(old, dict | list) or isinstance(new, dict | list) or not _same_scalar(old, new):
        out.append(Change("replace", pointer(at), old=old, new=new))
