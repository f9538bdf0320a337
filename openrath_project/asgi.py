"""ASGI entry point: ``openrath_project.asgi:application`` (HTTP and WebSocket)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")

# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from openrath_project.startup import require_migrations_applied  # noqa: E402

require_migrations_applied("the ASGI web process")

application = ProtocolTypeRouter({"http": django_asgi_app})
