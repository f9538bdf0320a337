"""The shell's Django app: the process-level commands and the wiring of the core's ports.

Commands: ``serve``, ``quickstart``, ``run_worker``, ``openrath_migrate`` and ``openapi`` (the
operator commands about tenants, projects, users and tokens stay in ``openrath_project.tenancy``);
:mod:`openrath_project.server.cli` gives three of them OpenRath's command lines
(``openrath-server``, ``openrath-worker``, ``openrath-migrate``).
When Django starts, :class:`~openrath_project.server.apps.ServerConfig` installs what the lower
layers call through ports (:mod:`openrath_project.server.ports`). See docs/architecture.md,
"Core and shell".

This package also stands where OpenRath's ``rath.server`` stands, and refuses its names on
purpose: ``AgentServer`` builds a second HTTP server around a runtime object, while this
product's server *is* the Django application (docs/migrating-from-openrath.md, "AgentServer and
production wiring"). ``from openrath_project.server import AgentServer`` fails on the import line
with one message that says what to do instead.
"""

from __future__ import annotations

from openrath_project.compat import OpenRathNameUnsupported

_SERVER = (
    "this product's server is the Django application itself (the /api/v1 HTTP API, the "
    "console, the WebSockets and the workers), configured by settings and never built around "
    "a runtime object"
)
_SERVER_INSTEAD = (
    "serve openrath_project.asgi:application (`openrath-server`, workers: `openrath-worker`); "
    "list the modules that define your workflows in OPENRATH_WORKFLOW_MODULES instead of "
    "register_assistant(); create API tokens with `manage.py create_token` instead of "
    "StaticTokenAuth; operator actions are always audited (GET /api/v1/audit/)"
)
_AUTH = (
    "API tokens are stored hashed, scoped to a tenant and a project with explicit grants, and "
    "can be revoked; they are never a map of secrets in code"
)
_AUTH_INSTEAD = "`manage.py create_token` (and `list_tokens`, `revoke_token`)"
_RESOURCES = (
    "assistants, sessions and feedback are this product's own records (registered workflows, "
    "stored sessions)"
)
_RESOURCES_INSTEAD = "/api/v1/workflows/ and /api/v1/sessions/ (flow.RemoteClient), or flow.Session"

#: OpenRath's ``rath.server`` names -> (why they are not provided, what to use instead).
UNSUPPORTED: dict[str, tuple[str, str]] = {
    "AgentServer": (_SERVER, _SERVER_INSTEAD),
    "create_app": (_SERVER, _SERVER_INSTEAD),
    "AuthProvider": (_AUTH, _AUTH_INSTEAD),
    "StaticTokenAuth": (_AUTH, _AUTH_INSTEAD),
    **dict.fromkeys(
        (
            "AssistantRecord",
            "FeedbackRecord",
            "SessionRecord",
            "ResourceStore",
            "InMemoryResourceStore",
            "SQLiteResourceStore",
            "PostgresResourceStore",
        ),
        (_RESOURCES, _RESOURCES_INSTEAD),
    ),
}


def __getattr__(name: str) -> object:
    entry = None if name.startswith("__") else UNSUPPORTED.get(name)
    if entry is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise OpenRathNameUnsupported(__name__, name, *entry)
