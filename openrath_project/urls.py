"""URL configuration: health, API v1, OpenAPI, console, admin."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults as _defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from effects_app.api.views import EffectViewSet
from memory_app.api.views import MemoryViewSet
from openrath_project import health, metrics_view
from openrath_project.console import views as console_views
from openrath_project.errors import error_body
from openrath_project.tenancy.api.views import AuditViewSet, ProjectViewSet
from retention_app.api.views import RetentionPolicyViewSet
from runs_app.api.compare import RunCompareView
from runs_app.api.forks import RunForkListView, RunForkView
from runs_app.api.replay import RunReplayView
from runs_app.api.sse import RunEventStreamView
from runs_app.api.views import InterruptViewSet, RunViewSet, WorkflowViewSet
from schedules_app.api.views import ScheduleViewSet
from sessions_app.api.sse import SessionEventStreamView
from sessions_app.api.views import SessionViewSet
from webhooks_app.api.views import WebhookViewSet

router = SimpleRouter()
router.register("projects", ProjectViewSet, basename="project")
router.register("sessions", SessionViewSet, basename="session")
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("runs", RunViewSet, basename="run")
router.register("interrupts", InterruptViewSet, basename="interrupt")
router.register("effects", EffectViewSet, basename="effect")
router.register("audit", AuditViewSet, basename="audit")
router.register("memory", MemoryViewSet, basename="memory")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("webhooks", WebhookViewSet, basename="webhook")
router.register("retention", RetentionPolicyViewSet, basename="retention")

api_v1 = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's init script from ?script= (no inline script: the CSP).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    # Server-Sent Events (docs/streaming.md): the WebSocket streams' items over plain HTTP.
    path("runs/<uuid:pk>/stream/", RunEventStreamView.as_view(), name="run-stream"),
    path("runs/<uuid:pk>/compare/<uuid:other>/", RunCompareView.as_view(), name="run-compare"),
    path("runs/<uuid:pk>/fork/", RunForkView.as_view(), name="run-fork"),
    path("runs/<uuid:pk>/forks/", RunForkListView.as_view(), name="run-forks"),
    path("runs/<uuid:pk>/replay/", RunReplayView.as_view(), name="run-replay"),
    path(
        "sessions/<uuid:pk>/stream/",
        SessionEventStreamView.as_view(),
        name="session-stream",
    ),
    *router.urls,
]

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view.metrics_view, name="metrics"),
    path("api/v1/", include(api_v1)),
    path(settings.ADMIN_PATH, admin.site.urls),
    path("console/", include("openrath_project.console.urls")),
    path("favicon.ico", console_views.favicon),
]


def _json_or_default(status: int, code: str, message: str, default: Any) -> Any:
    def handler(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.path.startswith("/api/"):
            return JsonResponse(error_body(code, message), status=status)
        return default(request, *args, **kwargs)

    return handler


handler400 = _json_or_default(400, "malformed_request", "bad request", _defaults.bad_request)
handler403 = _json_or_default(
    403, "permission_denied", "permission denied", _defaults.permission_denied
)
handler404 = _json_or_default(404, "not_found", "not found", _defaults.page_not_found)
handler500 = _json_or_default(500, "server_error", "internal error", _defaults.server_error)
