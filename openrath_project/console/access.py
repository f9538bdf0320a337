"""Who is using the console: the principal of the logged-in user, and the page decorator.

The tenant is the one chosen in the switcher, stored in the Django session under
``openrath_tenant`` (the key the API's permission code reads too, so the console's own fetches
of the API see the same tenant); ``openrath_project`` narrows the lists to one project (a
filter, not a scope). The grants are those of the user's role in the tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, Concatenate, ParamSpec

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from openrath_project.api.audit import audit_note
from openrath_project.api.permissions import SESSION_TENANT_KEY
from openrath_project.errors import NotFound, PermissionDenied
from openrath_project.tenancy.models import Membership, Project
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import memberships_of, parse_uuid, project_list
from openrath_project.tenancy.services import principal_for_user

SESSION_PROJECT_KEY = "openrath_project"

P = ParamSpec("P")


@dataclass
class Console:
    """What every console page knows: the principal, the switcher's choices, what may be done."""

    principal: Principal
    memberships: list[Membership]
    projects: list[Project]
    project: Project | None
    can: dict[str, bool] = field(default_factory=dict)

    @property
    def project_id(self) -> uuid.UUID | None:
        return self.project.id if self.project is not None else None


def console_principal(request: HttpRequest) -> Principal | None:
    """The user's principal in the chosen tenant (or their first one); ``None`` for a login
    that is not a member of any tenant. A stored tenant they left is forgotten."""
    tenant_ref = request.session.get(SESSION_TENANT_KEY)
    principal = principal_for_user(request.user, tenant_ref=tenant_ref)
    if principal is None and tenant_ref:
        request.session.pop(SESSION_TENANT_KEY, None)
        request.session.pop(SESSION_PROJECT_KEY, None)
        principal = principal_for_user(request.user)
    return principal


def _console_for(request: HttpRequest, principal: Principal) -> Console:
    projects = list(project_list(principal=principal).order_by("slug"))
    wanted = parse_uuid(request.session.get(SESSION_PROJECT_KEY))
    project = next((p for p in projects if p.id == wanted), None)
    user: Any = request.user
    memberships = list(memberships_of(user_id=user.pk))
    grants = principal.grants
    return Console(
        principal=principal,
        memberships=memberships,
        projects=projects,
        project=project,
        can={
            "resolve_interrupts": "interrupts:resolve" in grants,
            "resolve_effects": "effects:resolve" in grants,
            "cancel_runs": "runs:cancel" in grants,
            "resume_runs": "runs:write" in grants,
            # Forking and replaying make a run, as starting one does.
            "fork_runs": "runs:write" in grants,
            "replay_runs": "runs:write" in grants,
        },
    )


def render_error(
    request: HttpRequest, status: int, message: str, console: Console | None = None
) -> HttpResponse:
    titles = {403: "Not allowed", 404: "Not found"}
    return render(
        request,
        "console/error.html",
        {
            "console": console,
            "status": status,
            "title": titles.get(status, "Error"),
            "message": message,
        },
        status=status,
    )


ConsoleView = Callable[Concatenate[HttpRequest, Console, P], HttpResponse]


def console_page(
    *, grant: str | None = None, action: str | None = None, object_type: str | None = None
) -> Callable[[ConsoleView[P]], Callable[Concatenate[HttpRequest, P], HttpResponse]]:
    """Login required; resolve the principal (for the view and the audit middleware); check
    ``grant`` (403 before anything is read or changed); out-of-scope objects are a 404 page.

    ``action`` / ``object_type`` name the operation in the audit row the middleware writes.
    """

    def decorate(view: ConsoleView[P]) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            audit_note(request, action=action, object_type=object_type)
            principal = console_principal(request)
            if principal is None:
                return render_error(
                    request,
                    403,
                    "This login is not a member of any tenant. Ask a tenant admin to add you "
                    "(python manage.py create_user <tenant> <username> --role viewer).",
                )
            request.principal = principal  # type: ignore[attr-defined]
            console = _console_for(request, principal)
            try:
                if grant is not None:
                    principal.require_grant(grant)
                return view(request, console, *args, **kwargs)
            except PermissionDenied as exc:
                return render_error(request, 403, exc.message, console)
            except NotFound as exc:
                return render_error(request, 404, exc.message, console)

        protected = login_required(wrapper)

        @wraps(view)
        def entry(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            if not request.user.is_authenticated and request.method == "POST":
                return login_first(request, action=action, object_type=object_type)
            return protected(request, *args, **kwargs)

        return entry

    return decorate


def login_first(
    request: HttpRequest, *, action: str | None = None, object_type: str | None = None
) -> HttpResponse:
    """An action posted without a login: 401 (audited as denied), not a redirect to the login
    page that would be recorded as a successful request."""
    audit_note(request, action=action, object_type=object_type)
    return render(
        request,
        "console/error.html",
        {
            "status": 401,
            "title": "Log in first",
            "message": "Your login has expired or you are not logged in: log in and try again.",
            "login": True,
        },
        status=401,
    )
