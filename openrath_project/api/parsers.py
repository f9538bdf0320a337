"""The API's JSON parser: DRF's, refusing strings PostgreSQL cannot store."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.parsers import JSONParser

from openrath_project.jsontext import NUL, nul_path


class StrictJSONParser(JSONParser):
    """A NUL character (``\\u0000``) anywhere in the body is a 400 ``invalid`` whose details name
    the top-level field (the message gives the whole path), on every profile: SQLite would
    store it, PostgreSQL refuses the row."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        if isinstance(data, dict):
            for key, value in data.items():
                if NUL in key:
                    raise _refused("non_field_errors", "$ (a key)")
                where = nul_path(value, f"$.{key}")
                if where is not None:
                    raise _refused(key, where)
        elif (where := nul_path(data)) is not None:
            raise _refused("non_field_errors", where)
        return data


def _refused(field: str, where: str) -> ValidationError:
    return ValidationError({field: [f"must not contain the NUL character \\u0000 (at {where})"]})
