"""WebSocket routes (``ws/...``), served by ``openrath_project.asgi:application``.

Every route authenticates the handshake and checks its grant and scope before it joins a group
(see :mod:`openrath_project.ws.consumers`); the protocol is in ``docs/streaming.md``.
"""

from __future__ import annotations

from django.urls import URLPattern, path

from runs_app.consumers import RunStreamConsumer
from sessions_app.consumers import SessionStreamConsumer

websocket_urlpatterns: list[URLPattern] = [
    path(
        "ws/sessions/<uuid:session_id>/",
        SessionStreamConsumer.as_asgi(),
        name="ws-session-stream",
    ),
    path("ws/runs/<uuid:run_id>/", RunStreamConsumer.as_asgi(), name="ws-run-stream"),
]
