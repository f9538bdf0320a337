"""WSGI entry point: ``openrath_project.wsgi:application`` (HTTP only; use ASGI for WebSockets)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")

application = get_wsgi_application()

from openrath_project.startup import require_migrations_applied  # noqa: E402

require_migrations_applied("the WSGI web process")
