"""ASGI entry point: ``openrath_project.asgi:application`` (HTTP, WebSocket and lifespan).

Whatever server runs it (``manage.py serve``, ``uvicorn openrath_project.asgi:application``,
any ASGI server), each process:

* starts the embedded profile's in-process worker threads once, at lifespan start-up, and stops
  them at shutdown (uvicorn sends lifespan events by default; under a server that does not,
  run ``manage.py run_worker`` beside it);
* in production, checks the migrations at start: unapplied ones refuse the start with one line;
  an unreachable database keeps ``/healthz`` answering and everything else a 503 until it
  answers (``openrath_project.startup``).
"""

import os

from openrath_project.asgi_handler import get_one_hop_asgi_application, outside_the_event_loop

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")
# Settings give the web process a bounded PostgreSQL connection pool (DATABASE_POOL).
os.environ.setdefault("OPENRATH_PROCESS", "asgi")

from openrath_project.tracing_setup import configure_tracing  # noqa: E402

configure_tracing("web")  # before Django loads its middleware (the Django instrumentation's)

# Django must be set up before anything imports models. One thread hop per request, not one
# per middleware boundary (openrath_project/asgi_handler.py).
django_asgi_app = get_one_hop_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from openrath_project.bodylimit import AsgiBodyLimit  # noqa: E402
from openrath_project.jsonlog import install_log_redaction  # noqa: E402
from openrath_project.lifespan import Lifespan, StartupGateMiddleware  # noqa: E402
from openrath_project.publisher import install_publisher  # noqa: E402
from openrath_project.routing import websocket_urlpatterns  # noqa: E402
from openrath_project.startup import open_web_gate  # noqa: E402
from openrath_project.ws.auth import BrowserOriginValidator, StreamAuthMiddleware  # noqa: E402

gate = outside_the_event_loop(lambda: open_web_gate("the ASGI web process"))

# uvicorn's access and error lines name paths with their query strings: redact credentials.
install_log_redaction()

# Committed chunks, deltas and run events become channel-layer hints (once per process).
install_publisher()

# BrowserOriginValidator checks browsers' handshakes (an Origin header must be
# the handshake's own origin or a CSRF-trusted one, as Django's CSRF check); a handshake without
# Origin is not a browser and may only use a bearer token.
# AsgiBodyLimit refuses a body over OPENRATH_MAX_REQUEST_BYTES while it arrives, before Django
# reads (and spools) it: Content-Length or not.
# StartupGateMiddleware answers 503 (but /healthz and /readyz) while the production database has
# not been found migrated.
application = ProtocolTypeRouter(
    {
        "http": StartupGateMiddleware(AsgiBodyLimit(django_asgi_app), gate=gate),
        "websocket": StartupGateMiddleware(
            BrowserOriginValidator(StreamAuthMiddleware(URLRouter(websocket_urlpatterns))),
            gate=gate,
        ),
        "lifespan": Lifespan(),
    }
)
