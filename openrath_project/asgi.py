"""ASGI entry point: ``openrath_project.asgi:application`` (HTTP and WebSocket)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")
# Settings give the web process a bounded PostgreSQL connection pool (DATABASE_POOL).
os.environ.setdefault("OPENRATH_PROCESS", "asgi")

# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from openrath_project.publisher import install_publisher  # noqa: E402
from openrath_project.routing import websocket_urlpatterns  # noqa: E402
from openrath_project.startup import require_migrations_applied  # noqa: E402
from openrath_project.ws.auth import BrowserOriginValidator, StreamAuthMiddleware  # noqa: E402

require_migrations_applied("the ASGI web process")

# Committed chunks, deltas and run events become channel-layer hints (once per process).
install_publisher()

# BrowserOriginValidator is AllowedHostsOriginValidator for browsers (an Origin header must be
# an allowed host); a handshake without Origin is not a browser and may only use a bearer token.
application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": BrowserOriginValidator(StreamAuthMiddleware(URLRouter(websocket_urlpatterns))),
    }
)
