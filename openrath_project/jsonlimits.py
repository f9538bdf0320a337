"""The domain of a JSON value the product accepts, checked in one place. Pure Python.

JSON itself has no limits; the parts behind it do. Every JSON document the product parses (API
request bodies through :class:`~openrath_project.api.parsers.StrictJSONParser`, each line of an
import through :mod:`sessions_app.formats`) and every JSON value it stores from code (chunk
content, run state, memory metadata) is checked here, so all of them answer the same clear
error instead of a 500 from Python's parser, the JSON encoder or the database:

* **Depth.** A document nests at most :data:`MAX_JSON_DEPTH` (100) containers; a stored value
  (chunk content, run state, metadata) at most :data:`MAX_VALUE_DEPTH` (64), so a value always
  fits in a request body or an export line around it. (Python's parser gives up near 1000
  levels with a ``RecursionError``; recursive code in the product gave up sooner.)
* **Integers** lie in the signed 64-bit range: what a ``bigint`` column, SQLite's INTEGER and
  every JSON reader that is not arbitrary-precision can take. (Python's int parser refuses
  more than 4300 digits with a ``ValueError`` of its own; that is a parse error here too.)
* **Numbers are finite.** ``1e999`` is valid JSON that parses to infinity, which no JSON
  encoder, ``jsonb`` or ``numeric`` column accepts.
* **Strings and keys** hold no NUL (``\\u0000``: PostgreSQL's ``text``/``jsonb`` refuse it) and
  no unpaired surrogate (``\\udfff``: not Unicode, so it cannot be encoded as UTF-8 to be stored
  or sent back).

A problem is reported with the JSONPath-like location of the offending value (``$.a[2]``,
``$.a (a key)``), and, for documents, the top-level field it is under.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

#: Deepest nesting of a JSON document (request body, import line), in containers.
MAX_JSON_DEPTH = 100
#: Deepest nesting of a stored JSON value (chunk content, run state, metadata).
MAX_VALUE_DEPTH = 64
#: The integer range of every JSON number the product accepts (signed 64-bit).
MIN_JSON_INT = -(2**63)
MAX_JSON_INT = 2**63 - 1

NUL = "\x00"
_SEGMENT_CHARS = 80


@dataclass(frozen=True)
class JSONProblem:
    """What is wrong (``message``) and where (``path``); ``field`` is the top-level key of the
    document the problem is under (``None`` when it is the top level itself)."""

    path: str
    message: str
    field: str | None

    def text(self) -> str:
        return f"{self.message} (at {self.path})"


class JSONRefused(ValueError):
    """A JSON document or value outside the accepted domain; ``problem`` says where and why."""

    def __init__(self, problem: JSONProblem) -> None:
        super().__init__(problem.text())
        self.problem = problem


def _render(path: tuple[Any, ...] | None, root: str) -> str:
    parts: list[str] = []
    while path is not None:
        path, segment = path
        parts.append(segment)
    return root + "".join(reversed(parts))


def _first(path: tuple[Any, ...] | None, root: str) -> str:
    """The location of the top-level member ``path`` is under (depth problems are reported
    there: the full path of a value 100 levels down is no help to anyone)."""
    first = ""
    while path is not None:
        path, first = path
    return root + first


def _key_segment(key: str) -> str:
    if len(key) > _SEGMENT_CHARS:
        key = key[:_SEGMENT_CHARS] + "…"
    return f".{key}"


def string_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored (a NUL, an unpaired surrogate), or ``None``."""
    if NUL in text:
        return "must not contain the NUL character \\u0000"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(text[exc.start])
            return f"must not contain the unpaired surrogate \\u{code:04x} (not Unicode text)"
    return None


def _number_problem(value: int | float) -> str | None:
    if isinstance(value, int):
        if MIN_JSON_INT <= value <= MAX_JSON_INT:
            return None
        return f"must be an integer between {MIN_JSON_INT} and {MAX_JSON_INT}"
    if math.isfinite(value):
        return None
    return "must be a finite number (1e999 and the like overflow to infinity)"


def json_problem(
    value: Any,
    *,
    root: str = "$",
    max_depth: int = MAX_VALUE_DEPTH,
    check_strings: bool = True,
) -> JSONProblem | None:
    """The first problem of ``value`` (in document order), or ``None`` when it is in the domain.

    ``check_strings=False`` skips the per-string checks, for a document whose text has no
    ``\\u`` escape (valid UTF-8 text cannot decode to a NUL or a surrogate otherwise).
    Iterative: any depth is walked without recursion, and the walk stops at ``max_depth``.
    """
    # Entries: (value, depth, path as a linked list (parent, segment), top-level field).
    stack: list[tuple[Any, int, tuple[Any, ...] | None, str | None]] = [(value, 0, None, None)]
    while stack:
        item, depth, path, field = stack.pop()
        message: str | None = None
        if isinstance(item, str):
            message = string_problem(item) if check_strings else None
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int | float):
            message = _number_problem(item)
        elif isinstance(item, dict | list | tuple):
            if depth + 1 > max_depth:
                where = _first(path, root)
                return JSONProblem(where, f"is nested more than {max_depth} levels deep", field)
            if isinstance(item, dict):
                children: list[tuple[Any, int, tuple[Any, ...] | None, str | None]] = []
                for key, child in item.items():
                    child_path = (path, _key_segment(str(key)))
                    child_field = field if depth else str(key)
                    if check_strings and isinstance(key, str):
                        key_message = string_problem(key)
                        if key_message is not None:
                            where = _render(path, root) + " (a key)"
                            return JSONProblem(where, key_message, field)
                    children.append((child, depth + 1, child_path, child_field))
                stack.extend(reversed(children))
            else:
                stack.extend(
                    (child, depth + 1, (path, f"[{index}]"), field)
                    for index, child in reversed(list(enumerate(item)))
                )
        if message is not None:
            return JSONProblem(_render(path, root), message, field)
    return None


def check_value(value: Any, *, root: str = "$", max_depth: int = MAX_VALUE_DEPTH) -> None:
    """Raise :class:`JSONRefused` when ``value`` is outside the domain."""
    problem = json_problem(value, root=root, max_depth=max_depth)
    if problem is not None:
        raise JSONRefused(problem)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


def _deep_field(text: str, max_depth: int) -> JSONProblem:
    """For a document too deep for Python's parser: the top-level field the depth is under
    (a scan of the text's tokens, only on this error path)."""
    depth = 0
    last_string = ""
    field: str | None = None
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            last_string = token
        elif token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                break
        elif token in ("]", "}"):
            depth -= 1
        elif depth == 1:  # ":" after a top-level key
            try:
                field = str(json.loads(last_string))
            except ValueError:
                field = None
    path = "$" if field is None else "$" + _key_segment(field)
    return JSONProblem(path, f"is nested more than {max_depth} levels deep", field)


def loads(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse a JSON document and check it. ``ValueError`` for text that is not JSON (also
    ``NaN``/``Infinity`` and integers of more than 4300 digits); :class:`JSONRefused` for a
    document outside the domain."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise JSONRefused(_deep_field(text, max_depth)) from None
    problem = json_problem(value, max_depth=max_depth, check_strings="\\u" in text)
    if problem is not None:
        raise JSONRefused(problem)
    return value
