"""OpenAPI generation: every operation states its grant and its documented error responses."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema

from openrath_project.api.serializers import ErrorSerializer

ERROR_DESCRIPTIONS = {
    "400": "Invalid input; `details` names the fields.",
    "401": "Missing, malformed, unknown, expired or revoked credentials.",
    "403": "Authenticated, but the grant for this operation is missing.",
    "404": "Not found, or outside the caller's tenant or projects (indistinguishable).",
    "409": "Conflicts with the current state.",
    "413": "Request body or an item in it is too large.",
    "429": "Rate or quota limit; retry after `Retry-After` seconds.",
}


class OpenRathAutoSchema(AutoSchema):
    """Adds ``x-required-grant`` and the error responses to every operation."""

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        grants: dict[str, str] = getattr(self.view, "grants", {})
        action = getattr(self.view, "action", None)
        grant = grants.get(action or "") or grants.get(self.method)
        if grant:
            operation["x-required-grant"] = grant
            note = f"Required grant: `{grant}`."
            description = operation.get("description", "")
            operation["description"] = f"{description}\n\n{note}".strip()
        error_ref = self.resolve_serializer(ErrorSerializer, "response").ref
        statuses = ["400", "401", "403", "404", "413", "429"]
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
