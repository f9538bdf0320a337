"""WSGI entry point: ``openrath_project.wsgi:application`` (HTTP only; use ASGI for WebSockets)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")

from openrath_project.tracing_setup import configure_tracing  # noqa: E402

configure_tracing("web")  # before Django loads its middleware (the Django instrumentation's)

from openrath_project.bodylimit import WsgiBodyLimit  # noqa: E402
from openrath_project.jsonlog import install_log_redaction  # noqa: E402
from openrath_project.startup import require_migrations_applied  # noqa: E402

# The request body limit before Django reads the body (openrath_project.bodylimit).
application = WsgiBodyLimit(get_wsgi_application())

require_migrations_applied("the WSGI web process")
install_log_redaction()
