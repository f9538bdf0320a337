"""The approval form derived from a response schema (pure Python, no database)."""

from __future__ import annotations

import pytest

from openrath_project.console.schema_form import (
    FieldSpec,
    parse_json,
    parse_response,
    response_form,
)
from openrath_project.errors import ValidationFailed

SCHEMA = {
    "type": "object",
    "properties": {
        "note": {"type": "string", "title": "Note", "description": "why"},
        "count": {"type": "integer", "default": 3},
        "ratio": {"type": "number"},
        "urgent": {"type": "boolean"},
        "ack": {"type": "boolean"},
        "channel": {"enum": ["email", "chat"]},
        "level": {"type": "integer", "enum": [1, 2, 3]},
    },
    "required": ["note", "ack"],
}


def test_primitive_properties_become_typed_inputs():
    form = response_form(SCHEMA)
    assert form.typed
    assert [(f.name, f.type, f.required, f.widget) for f in form.fields] == [
        ("note", "string", True, "text"),
        ("count", "integer", False, "number"),
        ("ratio", "number", False, "number"),
        ("urgent", "boolean", False, "select"),
        ("ack", "boolean", True, "checkbox"),
        ("channel", "string", False, "select"),
        ("level", "integer", False, "select"),
    ]
    note = form.fields[0]
    assert (note.title, note.description, note.input_name) == ("Note", "why", "response.note")
    assert form.fields[1].default == 3
    assert form.fields[1].step == "1"
    assert form.fields[2].step == "any"
    assert form.fields[3].choices == [("", "—"), ("true", "true"), ("false", "false")]
    assert form.fields[5].choices == [("", "—"), ('"email"', "email"), ('"chat"', "chat")]
    assert form.fields[6].choices == [("", "—"), ("1", "1"), ("2", "2"), ("3", "3")]


@pytest.mark.parametrize(
    "schema",
    [
        None,
        {},
        {"type": "array"},
        {"type": "object"},
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"tags": {"type": "array"}}},
        {"type": "object", "properties": {"inner": {"type": "object"}}},
        {"type": "object", "properties": {"x": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"x": {"enum": ["a", 1]}}},
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["y"]},
        {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}]}}},
    ],
)
def test_anything_else_is_a_json_textarea(schema):
    assert response_form(schema).fields is None


def test_parse_typed_values():
    form = response_form(SCHEMA)
    data = {
        "response.note": "  ship it ",
        "response.count": "7",
        "response.ratio": "0.25",
        "response.urgent": "false",
        "response.ack": "on",
        "response.channel": '"chat"',
        "response.level": "2",
    }
    assert parse_response(form, data) == {
        "note": "ship it",
        "count": 7,
        "ratio": 0.25,
        "urgent": False,
        "ack": True,
        "channel": "chat",
        "level": 2,
    }


def test_blank_optional_inputs_are_left_out_and_an_unchecked_box_is_false():
    form = response_form(SCHEMA)
    assert parse_response(form, {"response.note": "x", "response.count": " "}) == {
        "note": "x",
        "ack": False,
    }


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("count", "1.5", "response.count: must be an integer"),
        ("ratio", "lots", "response.ratio: must be a number"),
        ("ratio", "inf", "response.ratio: must be a finite number"),
        ("urgent", "yes", "response.urgent: must be true or false"),
        ("channel", '"fax"', "response.channel: not one of the choices"),
        ("channel", "fax", "response.channel: not one of the choices"),
    ],
)
def test_bad_typed_values_name_the_input(field, value, message):
    with pytest.raises(ValidationFailed) as raised:
        parse_response(response_form(SCHEMA), {"response.note": "x", f"response.{field}": value})
    assert raised.value.message == message
    assert list(raised.value.details) == [f"response.{field}"]


def test_json_textarea():
    form = response_form(None)
    assert parse_response(form, {"response_json": "  "}) is None
    assert parse_response(form, {}) is None
    assert parse_response(form, {"response_json": '{"a": [1, 2]}'}) == {"a": [1, 2]}
    with pytest.raises(ValidationFailed) as raised:
        parse_response(form, {"response_json": "{a"})
    assert raised.value.message.startswith("response must be JSON: ")
    assert list(raised.value.details) == ["response"]


def test_json_rejects_non_standard_constants():
    with pytest.raises(ValidationFailed, match="result must be JSON: NaN is not JSON"):
        parse_json("NaN", field="result")


def test_number_keeps_integers_written_as_integers():
    spec = FieldSpec(name="n", type="number", required=False, title="n", description="")
    form = response_form({"type": "object", "properties": {"n": {"type": "number"}}})
    assert form.fields == (spec,)
    assert parse_response(form, {"response.n": "4"}) == {"n": 4}
    assert parse_response(form, {"response.n": "4.0"}) == {"n": 4.0}
