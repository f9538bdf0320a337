"""The approval form of an interrupt, derived from its response schema. Pure Python.

An object schema whose properties are all primitive (string, integer, number, boolean; an
``enum`` of those) becomes typed inputs, required ones marked. Anything else (no schema, nested
objects, arrays, unions) becomes one JSON textarea. Either way the server parses what was
submitted here and the service validates it against the schema, so the console reports the
same messages as the API.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openrath_project.errors import ValidationFailed

PRIMITIVE_TYPES = ("string", "integer", "number", "boolean")
#: Prefix of the typed inputs' names, so a property can never shadow another form field.
FIELD_PREFIX = "response."
JSON_FIELD = "response_json"


@dataclass(frozen=True)
class FieldSpec:
    """One typed input of a response form."""

    name: str
    type: str
    required: bool
    title: str
    description: str
    enum: tuple[Any, ...] | None = None
    default: Any = None

    @property
    def input_name(self) -> str:
        return FIELD_PREFIX + self.name

    @property
    def widget(self) -> str:
        """``select``, ``checkbox``, ``number`` or ``text`` (what the template renders)."""
        if self.enum is not None:
            return "select"
        if self.type == "boolean":
            return "checkbox" if self.required else "select"
        if self.type in ("integer", "number"):
            return "number"
        return "text"

    @property
    def choices(self) -> list[tuple[str, str]]:
        """``(submitted value, label)`` pairs of a select (a blank first when optional)."""
        if self.enum is not None:
            values = [(json.dumps(v), str(v)) for v in self.enum]
        else:
            values = [("true", "true"), ("false", "false")]
        return values if self.required else [("", "—"), *values]

    @property
    def step(self) -> str:
        return "1" if self.type == "integer" else "any"


@dataclass(frozen=True)
class ResponseForm:
    """``fields`` is ``None`` when the response is entered as JSON."""

    fields: tuple[FieldSpec, ...] | None

    @property
    def typed(self) -> bool:
        return self.fields is not None


def _primitive_type(prop: Any) -> str | None:
    if not isinstance(prop, Mapping):
        return None
    kind = prop.get("type")
    if "enum" in prop:
        values = prop["enum"]
        if not isinstance(values, list) or not values:
            return None
        if all(isinstance(v, str) for v in values):
            return "string" if kind in (None, "string") else None
        if all(isinstance(v, bool) for v in values):
            return "boolean" if kind in (None, "boolean") else None
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return kind if kind in ("integer", "number") else "number"
        return None
    return kind if isinstance(kind, str) and kind in PRIMITIVE_TYPES else None


def response_form(schema: Any) -> ResponseForm:
    """The form for a response schema (typed inputs when every property is primitive)."""
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        return ResponseForm(fields=None)
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return ResponseForm(fields=None)
    required = schema.get("required") or []
    if not isinstance(required, list) or any(r not in properties for r in required):
        return ResponseForm(fields=None)
    fields: list[FieldSpec] = []
    for name, prop in properties.items():
        kind = _primitive_type(prop)
        if kind is None:
            return ResponseForm(fields=None)
        fields.append(
            FieldSpec(
                name=str(name),
                type=kind,
                required=name in required,
                title=str(prop.get("title") or name),
                description=str(prop.get("description") or ""),
                enum=tuple(prop["enum"]) if "enum" in prop else None,
                default=prop.get("default"),
            )
        )
    return ResponseForm(fields=tuple(fields))


def _invalid(path: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{path}: {message}", details={path: [message]})


def _parse_field(spec: FieldSpec, raw: str | None) -> tuple[bool, Any]:
    """``(present, value)`` of one submitted input."""
    path = "response." + spec.name
    if spec.widget == "checkbox":
        return True, raw is not None
    if raw is None or raw.strip() == "":
        return False, None
    raw = raw.strip()
    if spec.enum is not None:
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise _invalid(path, "not one of the choices") from exc
        if value not in spec.enum:
            raise _invalid(path, "not one of the choices")
        return True, value
    if spec.type == "boolean":
        if raw not in ("true", "false"):
            raise _invalid(path, "must be true or false")
        return True, raw == "true"
    if spec.type == "integer":
        try:
            return True, int(raw)
        except ValueError as exc:
            raise _invalid(path, "must be an integer") from exc
    if spec.type == "number":
        try:
            number = float(raw)
        except ValueError as exc:
            raise _invalid(path, "must be a number") from exc
        if not math.isfinite(number):
            raise _invalid(path, "must be a finite number")
        return True, int(number) if number.is_integer() and "." not in raw else number
    return True, raw


def parse_response(form: ResponseForm, data: Mapping[str, str]) -> Any:
    """The response a submitted form carries.

    Typed: an object of the filled-in inputs (blank optional inputs left out; the service's
    schema check names a missing required one). JSON: the parsed textarea, or ``None`` when it
    is blank. Raises :class:`ValidationFailed` naming the input.
    """
    if form.fields is None:
        raw = (data.get(JSON_FIELD) or "").strip()
        if not raw:
            return None
        return parse_json(raw, field="response")
    response: dict[str, Any] = {}
    for spec in form.fields:
        present, value = _parse_field(spec, data.get(spec.input_name))
        if present:
            response[spec.name] = value
    return response


def parse_json(raw: str, *, field: str) -> Any:
    """Parse a JSON textarea; :class:`ValidationFailed` naming ``field`` when it is not JSON."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ValidationFailed(
            f"{field} must be JSON: {exc}", details={field: [f"not JSON: {exc}"]}
        ) from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def optional_int(raw: str, field: str) -> int | None:
    """A console form's whole-number field: ``None`` when left empty, a 400 naming ``field``
    when it is not a number (the schedule and retention forms)."""
    if not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValidationFailed(
            f"{field} must be a whole number", details={field: ["not a number"]}
        ) from None
