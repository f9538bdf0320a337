"""OpenAPI generation: every operation states its grant and its documented error responses."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema

from openrath_project.api.serializers import ErrorSerializer
from openrath_project.api.views import grant_for

ERROR_DESCRIPTIONS = {
    "400": "Invalid input; `details` names the fields.",
    "401": "Missing, malformed, unknown, expired or revoked credentials.",
    "403": "Authenticated, but the grant for this operation is missing.",
    "404": "Not found, or outside the caller's tenant or projects (indistinguishable).",
    "409": "Conflicts with the current state.",
    "413": "Request body or an item in it is too large.",
    "429": "Rate or quota limit; retry after `Retry-After` seconds.",
    "503": "The database or artifact storage is unavailable; nothing was changed. Retry after "
    "`Retry-After` seconds.",
}


class OpenRathAutoSchema(AutoSchema):
    """Adds ``x-required-grant`` and the error responses to every operation."""

    def get_summary(self) -> str | None:
        """Every operation has a summary: a list without its own says what it lists."""
        summary = super().get_summary()
        if summary is None and getattr(self.view, "action", None) == "list":
            model = getattr(getattr(self.view, "queryset", None), "model", None)
            if model is not None:
                return f"List {model._meta.verbose_name_plural}"
        return summary

    def _list_action(self) -> bool:
        return getattr(self.view, "action", None) in (None, "list")

    def get_filter_backends(self) -> list[Any]:
        """Only ``list`` filters its queryset: other GET actions (a run's events, a session's
        chunks) state their own parameters."""
        return super().get_filter_backends() if self._list_action() else []

    def _get_pagination_parameters(self) -> list[dict[str, Any]]:
        """``cursor``/``limit`` belong to ``list``; other paged actions state their own."""
        return super()._get_pagination_parameters() if self._list_action() else []

    def _get_paginator(self) -> Any:
        """Only GET answers a page (``{"results", "next"}``): a POST that returns many items
        (appended chunks) answers them as a bare array."""
        return super()._get_paginator() if self.method == "GET" else None

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        grant = grant_for(
            getattr(self.view, "grants", {}), getattr(self.view, "action", None), self.method
        )
        if grant:
            operation["x-required-grant"] = grant
            note = f"Required grant: `{grant}`."
            description = operation.get("description", "")
            operation["description"] = f"{description}\n\n{note}".strip()
        error_ref = self.resolve_serializer(ErrorSerializer, "response").ref
        statuses = ["400", "401", "403", "404", "413", "429", "503"]
        statuses += [str(s) for s in getattr(self.view, "extra_error_statuses", ())]
        responses = operation.setdefault("responses", {})
        for status in sorted(set(statuses)):
            responses.setdefault(
                status,
                {
                    "description": ERROR_DESCRIPTIONS.get(status, "Error."),
                    "content": {"application/json": {"schema": error_ref}},
                },
            )
        return operation


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "openrath_project.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "ort_<prefix>_<secret>"}


_DB_INTEGER_BOUNDS = {
    2**15 - 1,
    -(2**15),
    2**31 - 1,
    -(2**31),
    2**63 - 1,
    -(2**63),
    2**63,
    2**31,
    2**15,
}


def _strip_db_bounds(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for key in ("maximum", "minimum"):
                if node.get(key) in _DB_INTEGER_BOUNDS:
                    del node[key]
            if node.get("format") in ("int32", "int64"):
                del node["format"]
        for value in node.values():
            _strip_db_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _strip_db_bounds(value)


def strip_database_integer_bounds(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Model integer fields carry the *database's* column range (SQLite and PostgreSQL differ);
    the document must not depend on which database generated it, so those bounds are dropped."""
    _strip_db_bounds(result)
    return result


_NO_NUL = "^[^\\u0000]*$"


def _tighten(node: Any) -> None:
    """Request bodies: unknown fields are refused (``additionalProperties: false``, except
    free-form JSON objects) and strings may not hold NUL characters (the database refuses
    them), so the document says what the API accepts."""
    if not isinstance(node, dict):
        return
    if node.get("type") == "object" and "properties" in node:
        node.setdefault("additionalProperties", False)
        for child in node["properties"].values():
            _tighten(child)
    if node.get("type") == "string" and not {"format", "enum", "pattern"} & set(node):
        node["pattern"] = _NO_NUL
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        _tighten(node["items"])


def strict_request_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Apply :func:`_tighten` to every request component (``...Request``) and to the string
    query parameters."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request"):
            _tighten(component)
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                if (
                    parameter.get("in") == "query"
                    and schema.get("type") == "string"
                    and not ({"format", "enum", "pattern"} & set(schema))
                ):
                    schema["pattern"] = _NO_NUL
    return result
