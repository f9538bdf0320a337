"""Every route the project serves, as the isolation sweep names them.

HTTP routes come from walking ``get_resolver().url_patterns`` (includes followed), WebSocket
routes from ``openrath_project.routing.websocket_urlpatterns``. A route is named by its full
pattern string: the prefixes of its resolvers joined with its own pattern, exactly as Django
prints them (``api/v1/^sessions/(?P<pk>[^/.]+)/chunks/$``, ``console/runs/<uuid:run_id>/``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver


@dataclass(frozen=True)
class Route:
    """One served route: its full pattern and, for DRF viewsets, the HTTP methods it maps."""

    pattern: str
    #: ``{"GET", "POST"}`` for a viewset route; ``None`` for a plain Django view.
    methods: frozenset[str] | None
    view: str


def _walk(patterns: Iterable[Any], prefix: str = "") -> Iterator[Route]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            callback = entry.callback
            actions = getattr(callback, "actions", None)
            # DRF maps HEAD wherever it maps GET; it takes GET's grant (ScopedAPIView) and path.
            methods = frozenset(m.upper() for m in actions) - {"HEAD"} if actions else None
            view = f"{callback.__module__}.{getattr(callback, '__qualname__', callback)}"
            yield Route(prefix + str(entry.pattern), methods, view)


def http_routes() -> dict[str, Route]:
    """Every HTTP route of ``ROOT_URLCONF``, by full pattern (a duplicate pattern fails)."""
    found: dict[str, Route] = {}
    for route in _walk(get_resolver().url_patterns):
        assert route.pattern not in found, f"two routes share the pattern {route.pattern!r}"
        found[route.pattern] = route
    return found


def websocket_routes() -> dict[str, Route]:
    from openrath_project.routing import websocket_urlpatterns

    return {route.pattern: route for route in _walk(websocket_urlpatterns)}


def coverage_problems(
    served: dict[str, Route], covered: dict[str, frozenset[str] | None], public: dict[str, str]
) -> list[str]:
    """What is wrong with the sweep's tables against the served routes, one line each.

    ``covered`` maps a route to the methods the sweep exercises (``None``: not a viewset route,
    the methods are the sweep's business); ``public`` maps a route to why it needs no login.
    """
    problems = []
    for pattern, route in sorted(served.items()):
        in_covered, in_public = pattern in covered, pattern in public
        if not in_covered and not in_public:
            problems.append(f"neither swept nor allowlisted as public: {pattern} ({route.view})")
        elif in_covered and in_public:
            problems.append(f"both swept and allowlisted as public: {pattern}")
        elif in_covered and route.methods is not None and covered[pattern] != route.methods:
            swept = sorted(covered[pattern] or ())
            problems.append(
                f"{pattern} serves {sorted(route.methods)} but the sweep exercises {swept}"
            )
    for pattern in sorted((set(covered) | set(public)) - set(served)):
        problems.append(f"the sweep names a route that no longer exists: {pattern}")
    for pattern, reason in sorted(public.items()):
        if not reason.strip():
            problems.append(f"public route without a reason: {pattern}")
    return problems
