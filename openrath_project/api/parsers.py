"""The API's JSON parser: DRF's, refusing strings PostgreSQL cannot store."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from openrath_project.jsontext import nul_path


class StrictJSONParser(JSONParser):
    """A NUL character (``\\u0000``) anywhere in the body is a 400 ``malformed_request`` naming
    where it is, on every profile (SQLite would store it; PostgreSQL refuses the row)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        where = nul_path(data)
        if where is not None:
            raise ParseError(
                f"JSON strings must not contain the NUL character \\u0000 (at {where})"
            )
        return data
