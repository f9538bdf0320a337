"""The API's JSON parser: DRF's, refusing strings PostgreSQL cannot store."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.parsers import JSONParser

from openrath_project.jsontext import nul_path


class StrictJSONParser(JSONParser):
    """A NUL character (``\\u0000``) anywhere in the body is a 400 ``invalid`` whose details name
    the top-level field (the message gives the whole path), on every profile: SQLite would
    store it, PostgreSQL refuses the row."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        where = nul_path(data)
        if where is None:
            return data
        message = f"must not contain the NUL character \\u0000 (at {where})"
        field = where[2:].split(".", 1)[0].split("[", 1)[0].split(" ", 1)[0]
        if not isinstance(data, dict) or not field or field not in data:
            field = "non_field_errors"
        raise ValidationError({field: [message]})
