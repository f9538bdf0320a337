"""JSON text: the canonical form and its digest, and text PostgreSQL can store.

``jsonb`` (and ``text``) cannot hold the NUL character:
``"\\u0000"`` is valid JSON and SQLite takes it, but PostgreSQL refuses the whole row. Inputs
are checked where they enter (the API's JSON parser, chunk drafts), so both profiles answer
the same clear error instead of PostgreSQL's."""

from __future__ import annotations

import hashlib
import json
from typing import Any

NUL = "\x00"


def canonical(value: Any) -> str:
    """The one canonical JSON text of a value: sorted keys, no spaces, UTF-8 as is. Digests,
    state deltas and idempotency comparisons are all over this text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    """The SHA-256 (hex) of ``canonical(value)``: a run request's, an interrupt or effect
    request's and a checkpoint state's digest are all this one function."""
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def measure(value: Any, limit: int) -> int:
    """``len(canonical(value))`` when that is at most ``limit``, else some number above it:
    long lists and large objects are measured piece by piece and stop once over the limit, so
    asking whether a value is small (a delta shorter than a long list, a state value that fits
    inline) costs about ``limit``, not the value's size."""
    kind = type(value)
    if kind is dict and value:
        size = 1  # "{", then per member: key ":" value and "," or "}"
        for key, item in value.items():
            size += len(canonical(key)) + 2 + measure(item, limit - size)
            if size > limit:
                return size
        return size
    if kind is list and len(value) > _PIECE:
        size, start, piece = 1, 0, _PIECE  # "[", then per piece its items and separators
        while start < len(value):
            size += len(canonical(value[start : start + piece])) - 1
            if size > limit:
                return size
            start, piece = start + piece, piece * 2
        return size
    return len(canonical(value))


#: The first piece of a long list :func:`measure` encodes; each next piece is twice as long.
_PIECE = 8


def nul_path(value: Any, path: str = "$") -> str | None:
    """The JSONPath-like location of the first string (or object key) holding a NUL, or None."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and NUL in key:
                    return f"{where} (a key)"
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
    return None


def without_nul(value: Any, replacement: str = "\ufffd") -> Any:
    """``value`` (a string, or JSON-like structure, keys included) with each NUL replaced by
    U+FFFD, as undecodable bytes are: for tool output, which may be a binary file's bytes and
    is recorded as text. A value without a NUL is returned as it is (the same object)."""
    if nul_path(value) is None:
        return value
    return _replaced(value, replacement)


def _replaced(value: Any, replacement: str) -> Any:
    if isinstance(value, str):
        return value.replace(NUL, replacement)
    if isinstance(value, dict):
        return {_replaced(k, replacement): _replaced(v, replacement) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_replaced(item, replacement) for item in value]
    return value
