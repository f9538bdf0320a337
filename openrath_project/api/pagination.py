"""Cursor pagination with the documented shape ``{"results": [...], "next": url | null}``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import NotFound as DRFNotFound
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.errors import ValidationFailed


class CursorPage(CursorPagination):
    """Stable pages in the view's ``cursor_ordering``; ``?limit=`` up to the configured maximum.

    Each list view sets ``cursor_ordering`` ending in a unique key. The lists of things made over
    time page by ``-id``, newest first: their ids are uuid7 (``openrath_project.ids``, minted in
    the creating process, so ordered by millisecond across processes and strictly within one) or,
    for the audit log, an auto-increment. Projects page by ``slug``. The class default
    ``-created_at`` is not unique (ties may straddle a page boundary), so views do not rely on it.
    """

    ordering = "-created_at"
    page_size_query_param = "limit"
    cursor_query_param = "cursor"

    @property
    def max_page_size(self) -> int:  # type: ignore[override]
        return int(settings.OPENRATH_MAX_PAGE_SIZE)

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return int(self.page_size or 50)
        try:
            size = int(raw)
        except ValueError as exc:
            raise ValidationFailed(
                "limit must be an integer", details={"limit": ["not an integer"]}
            ) from exc
        if size < 1 or size > self.max_page_size:
            raise ValidationFailed(
                f"limit must be between 1 and {self.max_page_size}",
                details={"limit": [f"out of range 1..{self.max_page_size}"]},
            )
        return size

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        """A view may set ``cursor_ordering``; it must end in a unique key."""
        ordering = getattr(view, "cursor_ordering", None) or self.ordering
        return (ordering,) if isinstance(ordering, str) else tuple(ordering)

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        try:
            return super().paginate_queryset(queryset, request, view)
        except DRFNotFound as exc:  # DRF reports a bad cursor as 404; it is bad input
            raise ValidationFailed("invalid cursor", details={"cursor": ["invalid"]}) from exc

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"results": data, "next": self.get_next_link()})

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_page_size,
                }
        return parameters

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["results", "next"],
            "properties": {
                "results": schema,
                "next": {"type": "string", "nullable": True, "format": "uri"},
            },
        }
