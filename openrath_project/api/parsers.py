"""The API's JSON parser: every request body is parsed and checked by
:mod:`openrath_project.jsonlimits` (depth, 64-bit integers, finite numbers, no NUL or unpaired
surrogate), never by a bare ``json.load`` whose result could fail later as a 500."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import BaseParser, JSONParser

from openrath_project.jsonlimits import MAX_JSON_DEPTH, JSONRefused, loads


class StrictJSONParser(JSONParser):
    """A body outside the JSON domain is a 400 ``invalid`` whose details name the top-level
    field (the message gives the path), on every profile: a NUL (``\\u0000``) SQLite would
    store and PostgreSQL refuses, an unpaired surrogate (``\\udfff``) nothing can encode, a
    number that is not finite (``1e999``) or an integer outside the signed 64-bit range, or
    more than ``MAX_JSON_DEPTH`` (100) levels of nesting. Text that is not JSON (also ``NaN``,
    ``Infinity`` and integers of more than 4300 digits) is a 400 ``malformed_request``."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        context = parser_context or {}
        encoding = context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
            return loads(text, max_depth=MAX_JSON_DEPTH)
        except JSONRefused as exc:
            problem = exc.problem
            field = problem.field if problem.field is not None else "non_field_errors"
            raise ValidationError({field: [problem.text()]}) from None
        except ValueError as exc:  # not JSON (UnicodeDecodeError is a ValueError too)
            raise ParseError(f"JSON parse error - {exc}") from None


class JSONLines(str):
    """A JSON Lines request body, as text: each line is parsed (and checked against the same
    limits, ``MAX_JSON_DEPTH`` levels and the JSON domain) by the format reader that takes it
    (:mod:`sessions_app.formats`), which can name the file and line."""


class JSONLinesParser(BaseParser):
    """``application/jsonl``: the text of the body (UTF-8), for endpoints that read JSON Lines.
    The body limit (``OPENRATH_MAX_REQUEST_BYTES``) applies before this runs."""

    media_type = "application/jsonl"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        context = parser_context or {}
        encoding = context.get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read() if stream is not None else b""
        try:
            return JSONLines(raw.decode(encoding))
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON Lines parse error - not {encoding}: {exc}") from None


class NDJSONParser(JSONLinesParser):
    """``application/x-ndjson``: the same as ``application/jsonl``."""

    media_type = "application/x-ndjson"
