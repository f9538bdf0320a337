"""Tenant isolation, swept over every route the project serves (issue 10, item 2).

The tables below name every HTTP route (``get_resolver()``: API, console, admin, health,
metrics, schema) and every WebSocket route (``websocket_urlpatterns``) by its full pattern, and
say how the sweep exercises each one (the operations, their methods, bodies and expectations);
the deliberately public routes are in :data:`PUBLIC`, each with its reason. A route in neither
table, a viewset method no operation sends, or a table entry naming a route that is gone fails
:func:`test_every_route_is_swept_or_public`, so a new route cannot be forgotten. (Static files
are not a route: WhiteNoise serves them from the middleware, before URL resolution; a ``HEAD``
takes its ``GET``'s grant and path.)

Against real objects of tenant A (a session with chunks and an artifact, its fork, a run waiting
on its approval with a large state value kept as an artifact, a run stopped on an ambiguous
effect, a memory entry, audit rows, a token), each route meets:

* anonymous, and a revoked token of A: 401 (the console: a redirect to its login for a page, a
  401 for an action; the admin: a redirect to its login, also for a console login without staff
  status; the streams: close code 4401);
* a token of tenant B with every grant, and a token of A limited to another project with every
  grant (the console: B's admin; the admin: B's staff with every model permission; the streams:
  both tokens and B's console login): one of A's objects is a 404 (4404) whose body is byte for
  byte the body for an id that names nothing, the caller's own input aside; a list answers
  exactly what it answered before A had any object (no rows, no counts), and nothing anywhere
  holds A's ids, digests, usernames or text;
* a viewer of A's project (read grants only; the console's viewer; the admin's view-only staff):
  reads answer, every write is a 403.

Every refused write leaves every row of every table as it was (the audit log aside: it records
the denials, and for the API and the console it gains no "success" row). Every write body is
valid: after the refusals A's owner (the console: A's admin) sends the same requests and they
are done (a 409 where the state no longer allows it), so no refusal is a 400 in disguise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing.websocket import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from memory_app.models import MemoryStats, MemoryTerm
from openrath_project.api.throttling import local_buckets
from openrath_project.artifacts import artifact_exists
from openrath_project.asgi import application
from openrath_project.tenancy.fixed_columns import owned_models, owner_columns
from openrath_project.tenancy.models import ApiToken, AuditEvent, Membership, Project
from openrath_project.tenancy.services import token_create
from openrath_project.ws.db import close_db_pool
from retention_app import services as retention_services
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app.models import Checkpoint, Run, RunEvent
from sessions_app.models import Chunk, LineageEdge
from tests.factories import MembershipFactory
from tests.hardening.isolation_routes import coverage_problems, http_routes, websocket_routes
from tests.hardening.isolation_world import (
    SECRET,
    OtherTenantRows,
    World,
    audit_successes_since,
    audit_watermark,
    build_other_tenant_rows,
    build_world,
    fingerprint,
    fingerprint_diff,
    leaked,
    make_tokens,
    normalized,
    other_tenant_users,
    random_like,
)
from tests.runs_app.conftest import registry  # noqa: F401 - the runs fixture, reused here
from tests.support import error_of

ADMIN = "/" + django_settings.ADMIN_PATH

PUBLIC: dict[str, str] = {
    "healthz": "liveness: the process answers; nothing about dependencies or tenants",
    "readyz": "readiness of the database, Redis and storage; no tenant data",
    "metrics": (
        "Prometheus text for scrapers, limited to OPENRATH_METRICS_ALLOWED_CIDRS; labels are "
        "workflow and route names, never tenant data"
    ),
    "api/v1/schema/": "the OpenAPI document is public by design (DESIGN section 10)",
    "api/v1/docs/": "the Swagger UI page (offline assets); its calls to the API need a token",
    "console/login/": "the console's login form",
    "console/logout/": "ends the caller's own console login; nothing else",
    "favicon.ico": "a redirect to the console's static icon",
    f"{django_settings.ADMIN_PATH}login/": "the admin's login form",
    f"{django_settings.ADMIN_PATH}logout/": "ends the caller's own admin login; nothing else",
}

# --- The HTTP API -------------------------------------------------------------------------------

LIST = "list"  # GET a collection: B sees what it saw before A existed; A's viewer sees A's rows
READ = "read"  # GET one of A's objects (or a filter resolved in scope): 404 outside the scope
FILTER = "filter"  # GET a collection filtered by A's id: the same answer as for a random id
WRITE = "write"  # POST on one of A's objects: 404 outside the scope, 403 for the viewer
CREATE = "create"  # POST a new object naming A's project or session: as WRITE
RECALL = "recall"  # a POST that only reads (memory recall): 404 outside, 200 for the viewer
CATALOGUE = "catalogue"  # the registered workflows: code, the same answer for every tenant
PROJECT_CREATE = "project-create"  # a new project in the caller's own tenant


@dataclass(frozen=True)
class Api:
    """One operation on an API route. ``{name}`` in the path or body is a placeholder for a
    value of the world; ``target`` names the one that identifies A's object (it is swapped for a
    random value to get the answer for something that does not exist)."""

    kind: str
    method: str
    path: str
    target: str = ""
    body: Any = None
    #: What A's owner gets for the same request (the control: the body is valid).
    ok: tuple[int, ...] = (200,)
    #: Order of the owner's control among the writes (they change the world).
    control: int = 0
    #: What A's read-only viewer (limited to A's project) gets, when not the kind's default.
    viewer: int | None = None
    #: A placeholder whose value A's viewer and owner find in a list.
    sees: str = ""


S = "/api/v1/sessions/{session}"
R = "/api/v1/runs/{run}"
APPROVAL = {"workflow": "approval", "project": "{project}", "state": {"report": "iso"}}

API_TABLE: dict[str, list[Api]] = {
    "api/v1/^projects/$": [
        Api(LIST, "GET", "/api/v1/projects/", sees="project"),
        Api(PROJECT_CREATE, "POST", "/api/v1/projects/", body={"slug": "iso-new"}, ok=(201,)),
    ],
    "api/v1/^projects/(?P<pk>[^/]+)/$": [
        Api(READ, "GET", "/api/v1/projects/{project}/", target="project"),
        Api(READ, "GET", "/api/v1/projects/{lab_slug}/", target="lab_slug", viewer=404),
    ],
    "api/v1/^sessions/$": [
        Api(LIST, "GET", "/api/v1/sessions/", sees="session"),
        Api(READ, "GET", "/api/v1/sessions/?project={project}", target="project"),
        Api(
            CREATE,
            "POST",
            "/api/v1/sessions/",
            target="project",
            body={"project": "{project}", "title": "iso", "user_message": "hello"},
            ok=(201,),
            control=1,
        ),
    ],
    "api/v1/^sessions/import/$": [
        Api(
            CREATE,
            "POST",
            "/api/v1/sessions/import/",
            target="project",
            body={"project": "{project}", "files": [{"name": "a.jsonl", "content": "{export}"}]},
            ok=(201,),
            control=6,
        )
    ],
    "api/v1/^sessions/merge/$": [
        Api(
            CREATE,
            "POST",
            "/api/v1/sessions/merge/",
            target="session",
            body={"sessions": ["{session}", "{fork}"], "strategy": "concat"},
            ok=(201,),
            control=5,
        )
    ],
    "api/v1/^sessions/(?P<pk>[^/.]+)/$": [
        Api(READ, "GET", f"{S}/", target="session"),
        Api(READ, "GET", "/api/v1/sessions/{fork}/", target="fork"),
    ],
    "api/v1/^sessions/(?P<pk>[^/.]+)/artifacts/(?P<digest>[0-9a-f]{64})/$": [
        Api(READ, "GET", f"{S}/artifacts/{{session_digest}}/", target="session"),
    ],
    "api/v1/^sessions/(?P<pk>[^/.]+)/chunks/$": [
        Api(READ, "GET", f"{S}/chunks/", target="session"),
        Api(
            WRITE,
            "POST",
            f"{S}/chunks/",
            target="session",
            body={"chunks": [{"role": "user", "content": {"text": "more"}}]},
            ok=(201,),
            control=2,
        ),
    ],
    "api/v1/^sessions/(?P<pk>[^/.]+)/detach/$": [
        Api(WRITE, "POST", f"{S}/detach/", "session", {"title": "iso"}, ok=(201,), control=4),
    ],
    "api/v1/^sessions/(?P<pk>[^/.]+)/export/$": [
        Api(READ, "GET", f"{S}/export/", target="session"),
    ],
    "api/v1/^sessions/(?P<pk>[^/.]+)/fork/$": [
        Api(WRITE, "POST", f"{S}/fork/", "session", {"title": "iso"}, ok=(201,), control=3),
    ],
    "api/v1/^sessions/(?P<pk>[^/.]+)/lineage/$": [
        Api(READ, "GET", f"{S}/lineage/", target="session"),
    ],
    "api/v1/^workflows/$": [Api(CATALOGUE, "GET", "/api/v1/workflows/")],
    "api/v1/^workflows/(?P<name>[^/]+)/$": [
        Api(CATALOGUE, "GET", "/api/v1/workflows/approval/"),
    ],
    "api/v1/^runs/$": [
        Api(LIST, "GET", "/api/v1/runs/", sees="run"),
        Api(READ, "GET", "/api/v1/runs/?project={project}", target="project"),
        Api(FILTER, "GET", "/api/v1/runs/?parent={run}", target="run"),
        Api(CREATE, "POST", "/api/v1/runs/", "project", APPROVAL, ok=(201,), control=7),
        # Another project's session in a run of the caller's own project.
        Api(
            CREATE,
            "POST",
            "/api/v1/runs/",
            target="session",
            body={**APPROVAL, "project": "{own_project}", "session": "{session}"},
            ok=(201,),
            control=7,
        ),
    ],
    "api/v1/^runs/(?P<pk>[^/.]+)/$": [
        Api(READ, "GET", f"{R}/", target="run"),
        Api(READ, "GET", "/api/v1/runs/{review_run}/", target="review_run"),
    ],
    "api/v1/^runs/(?P<pk>[^/.]+)/artifacts/(?P<digest>[0-9a-f]{64})/$": [
        Api(READ, "GET", f"{R}/artifacts/{{run_digest}}/", target="run"),
    ],
    "api/v1/^runs/(?P<pk>[^/.]+)/cancel/$": [
        Api(WRITE, "POST", f"{R}/cancel/", "run", {"reason": "iso"}, control=9),
    ],
    "api/v1/^runs/(?P<pk>[^/.]+)/checkpoints/$": [
        Api(READ, "GET", f"{R}/checkpoints/", target="run"),
    ],
    "api/v1/^runs/(?P<pk>[^/.]+)/events/$": [
        Api(READ, "GET", f"{R}/events/", target="run"),
    ],
    # The Server-Sent Events streams, asked for what is committed (then they end).
    "api/v1/runs/<uuid:pk>/stream/": [
        Api(READ, "GET", f"{R}/stream/?follow=false", target="run"),
    ],
    # Forks (issue 22): a fork of A's run from its start, and the list of its forks.
    "api/v1/runs/<uuid:pk>/fork/": [
        Api(WRITE, "POST", f"{R}/fork/", "run", {"checkpoint": 0}, ok=(201,), control=8),
    ],
    "api/v1/runs/<uuid:pk>/forks/": [
        Api(READ, "GET", f"{R}/forks/", target="run"),
    ],
    # Replay (a regression check of A's finished run) and the comparison with its fork.
    "api/v1/runs/<uuid:pk>/replay/": [
        Api(WRITE, "POST", "/api/v1/runs/{done_run}/replay/", "done_run", ok=(201,), control=13),
    ],
    "api/v1/runs/<uuid:pk>/compare/<uuid:other>/": [
        Api(READ, "GET", "/api/v1/runs/{done_run}/compare/{run_fork}/", target="done_run"),
        Api(READ, "GET", "/api/v1/runs/{done_run}/compare/{run_fork}/", target="run_fork"),
    ],
    "api/v1/sessions/<uuid:pk>/stream/": [
        Api(READ, "GET", f"{S}/stream/?follow=false", target="session"),
    ],
    "api/v1/^runs/(?P<pk>[^/.]+)/resume/$": [
        Api(
            WRITE,
            "POST",
            "/api/v1/runs/{review_run}/resume/",
            target="review_run",
            body={"reason": "iso"},
            ok=(200, 409),  # the effect's resolution (control 10) has already requeued it
            control=11,
        ),
    ],
    "api/v1/^interrupts/$": [
        Api(LIST, "GET", "/api/v1/interrupts/", sees="interrupt"),
        Api(READ, "GET", "/api/v1/interrupts/?project={project}", target="project"),
        Api(FILTER, "GET", "/api/v1/interrupts/?run={run}", target="run"),
    ],
    "api/v1/^interrupts/(?P<pk>[^/.]+)/$": [
        Api(READ, "GET", "/api/v1/interrupts/{interrupt}/", target="interrupt"),
    ],
    "api/v1/^interrupts/(?P<pk>[^/.]+)/resolve/$": [
        Api(
            WRITE,
            "POST",
            "/api/v1/interrupts/{interrupt}/resolve/",
            target="interrupt",
            body={
                "decision": "approve",
                "response": {"note": "iso"},
                "request_digest": "{interrupt_digest}",
            },
            control=8,
        ),
    ],
    "api/v1/^effects/$": [
        Api(LIST, "GET", "/api/v1/effects/", sees="effect"),
        Api(READ, "GET", "/api/v1/effects/?project={project}", target="project"),
        Api(FILTER, "GET", "/api/v1/effects/?run={review_run}", target="review_run"),
    ],
    "api/v1/^effects/(?P<pk>[^/.]+)/$": [
        Api(READ, "GET", "/api/v1/effects/{effect}/", target="effect"),
    ],
    "api/v1/^effects/(?P<pk>[^/.]+)/resolve/$": [
        Api(
            WRITE,
            "POST",
            "/api/v1/effects/{effect}/resolve/",
            target="effect",
            body={"outcome": "not_applied", "request_digest": "{effect_digest}", "reason": "iso"},
            control=10,
        ),
    ],
    "api/v1/^audit/$": [
        Api(LIST, "GET", "/api/v1/audit/", sees="audit_note"),
        Api(FILTER, "GET", "/api/v1/audit/?project={project}", target="project"),
        Api(FILTER, "GET", "/api/v1/audit/?object_id={session}", target="session"),
    ],
    "api/v1/^memory/$": [
        Api(LIST, "GET", "/api/v1/memory/", sees="memory"),
        Api(READ, "GET", "/api/v1/memory/?project={project}", target="project"),
        Api(FILTER, "GET", "/api/v1/memory/?session={session}", target="session"),
        Api(
            CREATE,
            "POST",
            "/api/v1/memory/",
            target="project",
            body={"project": "{project}", "text": "iso fact"},
            ok=(201,),
            control=12,
        ),
        # Another project's session as the place of a fact of the caller's own project.
        Api(
            CREATE,
            "POST",
            "/api/v1/memory/",
            target="session",
            body={
                "project": "{own_project}",
                "text": "iso session fact",
                "scope": "session",
                "session": "{session}",
            },
            ok=(201,),
            control=12,
        ),
    ],
    "api/v1/^memory/recall/$": [
        Api(
            RECALL,
            "POST",
            "/api/v1/memory/recall/",
            target="project",
            body={"project": "{project}", "query": "zebra"},
        ),
        Api(
            RECALL,
            "POST",
            "/api/v1/memory/recall/",
            target="session",
            body={
                "project": "{own_project}",
                "query": "zebra",
                "scope": "session",
                "session": "{session}",
            },
        ),
    ],
    # Schedules (they start runs: runs:write) and webhook subscriptions (projects:write).
    "api/v1/^schedules/$": [
        Api(LIST, "GET", "/api/v1/schedules/", sees="schedule"),
        Api(READ, "GET", "/api/v1/schedules/?project={project}", target="project"),
        Api(
            CREATE,
            "POST",
            "/api/v1/schedules/",
            target="project",
            body={
                "project": "{project}",
                "workflow": "approval",
                "kind": "interval",
                "interval_seconds": 600,
                "input": {"report": "iso"},
            },
            ok=(201,),
            control=14,
        ),
    ],
    "api/v1/^schedules/(?P<pk>[^/.]+)/$": [
        Api(READ, "GET", "/api/v1/schedules/{schedule}/", target="schedule"),
        Api(
            WRITE, "PATCH", "/api/v1/schedules/{schedule}/", "schedule", {"name": "iso"}, control=15
        ),
        Api(WRITE, "DELETE", "/api/v1/schedules/{schedule}/", "schedule", ok=(204,), control=30),
    ],
    "api/v1/^schedules/(?P<pk>[^/.]+)/fires/$": [
        Api(READ, "GET", "/api/v1/schedules/{schedule}/fires/", target="schedule"),
    ],
    "api/v1/^schedules/(?P<pk>[^/.]+)/next/$": [
        Api(READ, "GET", "/api/v1/schedules/{schedule}/next/", target="schedule"),
    ],
    "api/v1/^schedules/(?P<pk>[^/.]+)/pause/$": [
        Api(WRITE, "POST", "/api/v1/schedules/{schedule}/pause/", "schedule", control=16),
    ],
    "api/v1/^schedules/(?P<pk>[^/.]+)/resume/$": [
        Api(WRITE, "POST", "/api/v1/schedules/{schedule}/resume/", "schedule", control=17),
    ],
    "api/v1/^webhooks/$": [
        Api(LIST, "GET", "/api/v1/webhooks/", sees="webhook"),
        Api(READ, "GET", "/api/v1/webhooks/?project={project}", target="project"),
        Api(
            CREATE,
            "POST",
            "/api/v1/webhooks/",
            target="project",
            body={
                "project": "{project}",
                "url": "http://127.0.0.1:9/iso",
                "event_types": ["run.failed"],
            },
            ok=(201,),
            control=18,
        ),
    ],
    "api/v1/^webhooks/(?P<pk>[^/.]+)/$": [
        Api(READ, "GET", "/api/v1/webhooks/{webhook}/", target="webhook"),
        Api(
            WRITE,
            "PATCH",
            "/api/v1/webhooks/{webhook}/",
            "webhook",
            {"description": "iso"},
            control=19,
        ),
        Api(WRITE, "DELETE", "/api/v1/webhooks/{webhook}/", "webhook", ok=(204,), control=31),
    ],
    "api/v1/^webhooks/(?P<pk>[^/.]+)/deliveries/$": [
        Api(READ, "GET", "/api/v1/webhooks/{webhook}/deliveries/", target="webhook"),
    ],
    "api/v1/^webhooks/(?P<pk>[^/.]+)/deliveries/(?P<delivery_id>[^/.]+)/$": [
        Api(READ, "GET", "/api/v1/webhooks/{webhook}/deliveries/{delivery}/", target="webhook"),
        Api(READ, "GET", "/api/v1/webhooks/{webhook}/deliveries/{delivery}/", target="delivery"),
    ],
    "api/v1/^webhooks/(?P<pk>[^/.]+)/deliveries/(?P<delivery_id>[^/.]+)/redeliver/$": [
        Api(
            WRITE,
            "POST",
            "/api/v1/webhooks/{webhook}/deliveries/{delivery}/redeliver/",
            target="delivery",
            ok=(202,),  # queued again: the worker sends it
            control=20,
        ),
    ],
    "api/v1/^webhooks/(?P<pk>[^/.]+)/disable/$": [
        Api(
            WRITE,
            "POST",
            "/api/v1/webhooks/{webhook}/disable/",
            "webhook",
            {"reason": "iso"},
            control=21,
        ),
    ],
    "api/v1/^webhooks/(?P<pk>[^/.]+)/enable/$": [
        Api(WRITE, "POST", "/api/v1/webhooks/{webhook}/enable/", "webhook", control=22),
    ],
    # Retention policies (projects:write to change or apply; a dry run and the pass log read).
    "api/v1/^retention/$": [
        Api(LIST, "GET", "/api/v1/retention/", sees="retention_policy"),
        Api(
            CREATE,
            "POST",
            "/api/v1/retention/",
            target="project",
            body={"project": "{project}", "runs_keep_last": 1000},
            ok=(201,),
            control=33,  # after the delete (control 32): one policy per project
        ),
    ],
    "api/v1/^retention/preview/$": [
        # A dry run of a draft: a read sent by POST, as a recall.
        Api(
            RECALL,
            "POST",
            "/api/v1/retention/preview/",
            target="project",
            body={"project": "{project}", "runs_keep_last": 0, "sessions_keep_last": 0},
        ),
    ],
    "api/v1/^retention/(?P<pk>[^/.]+)/$": [
        Api(READ, "GET", "/api/v1/retention/{retention_policy}/", target="retention_policy"),
        Api(
            WRITE,
            "PATCH",
            "/api/v1/retention/{retention_policy}/",
            "retention_policy",
            {"interval_seconds": 7200},
            control=23,
        ),
        Api(
            WRITE,
            "DELETE",
            "/api/v1/retention/{retention_policy}/",
            "retention_policy",
            ok=(204,),
            control=32,
        ),
    ],
    "api/v1/^retention/(?P<pk>[^/.]+)/preview/$": [
        Api(READ, "GET", "/api/v1/retention/{retention_policy}/preview/", "retention_policy"),
    ],
    "api/v1/^retention/(?P<pk>[^/.]+)/apply/$": [
        Api(
            WRITE,
            "POST",
            "/api/v1/retention/{retention_policy}/apply/",
            "retention_policy",
            control=24,
        ),
    ],
    "api/v1/^retention/(?P<pk>[^/.]+)/passes/$": [
        Api(
            READ,
            "GET",
            "/api/v1/retention/{retention_policy}/passes/",
            target="retention_policy",
            sees="retention_actor",
        ),
    ],
}

#: Status by kind, for anonymous, revoked, other_tenant, other_project, viewer.
API_EXPECT: dict[str, tuple[int, int, int, int, int]] = {
    LIST: (401, 401, 200, 200, 200),
    READ: (401, 401, 404, 404, 200),
    FILTER: (401, 401, 200, 200, 200),
    WRITE: (401, 401, 404, 404, 403),
    CREATE: (401, 401, 404, 404, 403),
    RECALL: (401, 401, 404, 404, 200),
    CATALOGUE: (401, 401, 200, 200, 200),
    PROJECT_CREATE: (401, 401, 201, 403, 403),
}
PRINCIPALS = ("anonymous", "revoked", "other_tenant", "other_project", "viewer")
OUTSIDERS = ("other_tenant", "other_project")
WRITES = (WRITE, CREATE, PROJECT_CREATE)


# --- The console and the admin ------------------------------------------------------------------

PAGE = "page"  # a page listing things: B's answer is what it was before A had any object
OBJECT = "object"  # a page of one of A's objects (or filtered by one): as for a random id
ACTION = "action"  # a POST on one of A's objects
SWITCH = "switch"  # the console's tenant switcher
SELF = "self"  # an admin page about the staff member only (password, i18n, own rows)


@dataclass(frozen=True)
class Page:
    """One operation on a console or admin route (placeholders as in :class:`Api`)."""

    kind: str
    method: str
    path: str
    target: str = ""
    body: Any = None
    #: What A's admin gets for an action (the control).
    ok: tuple[int, ...] = (302,)
    control: int = 0
    #: What the viewer gets (console: A's viewer; admin: A's view-only staff); None: any answer.
    viewer: int | None = 200
    #: What B's console admin gets for an OBJECT (a filter by A's id answers 200).
    outsider: int = 404
    #: Why an outsider may tell this object from a missing one (a known, accepted oracle).
    oracle: str = ""
    #: The target is one A's viewer is shown anyway (its own project, in the page's project
    #: switcher): its 403 for A's object is not compared with the one for a missing object.
    viewer_knows_target: bool = False


C = "/console"
CONSOLE_TABLE: dict[str, list[Page]] = {
    "console/": [Page(PAGE, "GET", f"{C}/")],
    "console/switch/": [
        Page(SWITCH, "POST", f"{C}/switch/", "tenant", {"tenant": "{tenant}"}, viewer=302),
        Page(
            SWITCH, "POST", f"{C}/switch/", "tenant_slug", {"tenant": "{tenant_slug}"}, viewer=302
        ),
    ],
    "console/approvals/": [Page(PAGE, "GET", f"{C}/approvals/")],
    "console/approvals/<uuid:interrupt_id>/resolve/": [
        Page(
            ACTION,
            "POST",
            f"{C}/approvals/{{interrupt}}/resolve/",
            target="interrupt",
            body={"decision": "reject", "request_digest": "{interrupt_digest}", "reason": "iso"},
            control=1,
            viewer=403,
        )
    ],
    "console/approvals/approve-many/": [
        Page(
            ACTION,
            "POST",
            f"{C}/approvals/approve-many/",
            target="interrupt",
            body={"interrupt": "{interrupt}", "digest-{interrupt}": "{interrupt_digest}"},
            ok=(302, 409),  # the single resolve (control 1) has already decided it
            control=5,
            viewer=403,
        )
    ],
    "console/effects/": [Page(PAGE, "GET", f"{C}/effects/")],
    "console/effects/<uuid:effect_id>/resolve/": [
        Page(
            ACTION,
            "POST",
            f"{C}/effects/{{effect}}/resolve/",
            target="effect",
            body={"outcome": "not_applied", "request_digest": "{effect_digest}", "reason": "iso"},
            control=3,
            viewer=403,
        )
    ],
    "console/runs/": [
        Page(PAGE, "GET", f"{C}/runs/"),
        Page(OBJECT, "GET", f"{C}/runs/?project={{project}}", "project", outsider=200),
        Page(OBJECT, "GET", f"{C}/runs/?before={{run}}", target="run", outsider=200),
    ],
    "console/runs/<uuid:run_id>/": [
        Page(OBJECT, "GET", f"{C}/runs/{{run}}/", target="run"),
        Page(OBJECT, "GET", f"{C}/runs/{{review_run}}/", target="review_run"),
    ],
    "console/runs/<uuid:run_id>/cancel/": [
        Page(
            ACTION,
            "POST",
            f"{C}/runs/{{run}}/cancel/",
            target="run",
            body={"reason": "iso"},
            control=2,
            viewer=403,
        ),
    ],
    "console/runs/<uuid:run_id>/resume/": [
        Page(
            ACTION,
            "POST",
            f"{C}/runs/{{review_run}}/resume/",
            target="review_run",
            body={"reason": "iso"},
            ok=(302, 409),  # the effect's resolution (control 3) has already requeued it
            control=4,
            viewer=403,
        ),
    ],
    "console/runs/<uuid:run_id>/fork/": [
        Page(
            ACTION,
            "POST",
            f"{C}/runs/{{done_run}}/fork/",
            target="done_run",
            body={"checkpoint": "0", "reason": "iso"},
            control=6,
            viewer=403,
        ),
    ],
    "console/runs/<uuid:run_id>/replay/": [
        Page(ACTION, "POST", f"{C}/runs/{{done_run}}/replay/", "done_run", control=7, viewer=403),
    ],
    "console/runs/<uuid:run_id>/compare/<uuid:other_id>/": [
        Page(OBJECT, "GET", f"{C}/runs/{{done_run}}/compare/{{run_fork}}/", target="done_run"),
        Page(OBJECT, "GET", f"{C}/runs/{{done_run}}/compare/{{run_fork}}/", target="run_fork"),
    ],
    "console/schedules/": [Page(PAGE, "GET", f"{C}/schedules/")],
    "console/schedules/new/": [
        Page(
            ACTION,
            "POST",
            f"{C}/schedules/new/",
            target="project",
            body={
                "project": "{project}",
                "workflow": "approval",
                "kind": "interval",
                "interval_seconds": "600",
                "input": '{"report": "iso"}',
            },
            control=8,
            viewer=403,
            viewer_knows_target=True,
        ),
    ],
    "console/schedules/<uuid:schedule_id>/pause/": [
        Page(
            ACTION, "POST", f"{C}/schedules/{{schedule}}/pause/", "schedule", control=9, viewer=403
        ),
    ],
    "console/schedules/<uuid:schedule_id>/resume/": [
        Page(
            ACTION,
            "POST",
            f"{C}/schedules/{{schedule}}/resume/",
            "schedule",
            control=10,
            viewer=403,
        ),
    ],
    "console/schedules/<uuid:schedule_id>/delete/": [
        Page(
            ACTION,
            "POST",
            f"{C}/schedules/{{schedule}}/delete/",
            "schedule",
            control=11,
            viewer=403,
        ),
    ],
    "console/webhooks/": [Page(PAGE, "GET", f"{C}/webhooks/")],
    "console/webhooks/new/": [
        Page(
            ACTION,
            "POST",
            f"{C}/webhooks/new/",
            target="project",
            body={
                "project": "{project}",
                "url": "http://127.0.0.1:9/iso-hook",
                "event_types": "run.succeeded",
            },
            ok=(201,),
            control=12,
            viewer=403,
            viewer_knows_target=True,
        ),
    ],
    "console/webhooks/<uuid:webhook_id>/": [
        Page(OBJECT, "GET", f"{C}/webhooks/{{webhook}}/", target="webhook"),
    ],
    "console/webhooks/<uuid:webhook_id>/disable/": [
        Page(
            ACTION,
            "POST",
            f"{C}/webhooks/{{webhook}}/disable/",
            "webhook",
            {"reason": "iso"},
            control=13,
            viewer=403,
        ),
    ],
    "console/webhooks/<uuid:webhook_id>/enable/": [
        Page(
            ACTION, "POST", f"{C}/webhooks/{{webhook}}/enable/", "webhook", control=14, viewer=403
        ),
    ],
    "console/webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/redeliver/": [
        Page(
            ACTION,
            "POST",
            f"{C}/webhooks/{{webhook}}/deliveries/{{delivery}}/redeliver/",
            "webhook",
            control=15,
            viewer=403,
        ),
        Page(
            ACTION,
            "POST",
            f"{C}/webhooks/{{webhook}}/deliveries/{{delivery}}/redeliver/",
            "delivery",
            control=16,
            ok=(302, 409),  # the redelivery above (control 15) has already reopened it
            viewer=403,
        ),
    ],
    "console/webhooks/<uuid:webhook_id>/delete/": [
        Page(
            ACTION, "POST", f"{C}/webhooks/{{webhook}}/delete/", "webhook", control=17, viewer=403
        ),
    ],
    "console/queues/": [Page(PAGE, "GET", f"{C}/queues/")],
    "console/retention/": [Page(PAGE, "GET", f"{C}/retention/")],
    "console/retention/new/": [
        Page(
            ACTION,
            "POST",
            f"{C}/retention/new/",
            target="project",
            body={"project": "{project}", "runs_keep_last": "1000"},
            control=20,  # after the delete (control 19): one policy per project
            viewer=403,
            viewer_knows_target=True,
        ),
    ],
    "console/retention/<uuid:policy_id>/preview/": [
        Page(OBJECT, "GET", f"{C}/retention/{{retention_policy}}/preview/", "retention_policy"),
    ],
    "console/retention/<uuid:policy_id>/apply/": [
        Page(
            ACTION,
            "POST",
            f"{C}/retention/{{retention_policy}}/apply/",
            "retention_policy",
            control=18,
            viewer=403,
        ),
    ],
    "console/retention/<uuid:policy_id>/delete/": [
        Page(
            ACTION,
            "POST",
            f"{C}/retention/{{retention_policy}}/delete/",
            "retention_policy",
            control=19,
            viewer=403,
        ),
    ],
    "console/sessions/": [
        Page(PAGE, "GET", f"{C}/sessions/"),
        Page(OBJECT, "GET", f"{C}/sessions/?before={{session}}", "session", outsider=200),
    ],
    "console/sessions/<uuid:session_id>/": [
        Page(OBJECT, "GET", f"{C}/sessions/{{session}}/", target="session"),
        Page(OBJECT, "GET", f"{C}/sessions/{{fork}}/", target="fork"),
    ],
    "console/sessions/compare/": [
        Page(PAGE, "GET", f"{C}/sessions/compare/"),
        Page(OBJECT, "GET", f"{C}/sessions/compare/?a={{session}}&b={{fork}}", target="session"),
    ],
    "console/sessions/<uuid:session_id>/lineage/": [
        Page(OBJECT, "GET", f"{C}/sessions/{{session}}/lineage/", target="session"),
    ],
    "console/sessions/<uuid:session_id>/runs/new/": [
        Page(
            ACTION,
            "POST",
            f"{C}/sessions/{{session}}/runs/new/",
            target="session",
            # enqueue: the control starts it whether or not a run is active on the session
            body={"workflow": "approval", "state": '{"report": "iso"}', "input_policy": "enqueue"},
            control=21,
            viewer=403,
        ),
    ],
}


# --- Admin -----------------------------------------------------------------------------------

#: Every registered model: its admin path -> (the placeholder of A's row, the changelist action
#: the sweep posts). A new registered model adds routes no table names: the sweep fails on it.
ADMIN_MODELS: dict[str, tuple[str, str]] = {
    "auth/group": ("group", "delete_selected"),
    "auth/user": ("user", "delete_selected"),
    "tenancy/tenant": ("tenant", "delete_selected"),
    "tenancy/project": ("project", "delete_selected"),
    "tenancy/membership": ("membership", "delete_selected"),
    "tenancy/apitoken": ("token", "revoke"),
    "tenancy/auditevent": ("audit", "delete_selected"),
    "sessions_app/session": ("session", "delete_selected"),
    "sessions_app/chunk": ("chunk", "delete_selected"),
    "sessions_app/lineageedge": ("edge", "delete_selected"),
    "runs_app/workflowplan": ("plan", "delete_selected"),
    "runs_app/run": ("run", "cancel_runs"),
    "runs_app/runevent": ("run_event", "delete_selected"),
    "runs_app/checkpoint": ("checkpoint", "delete_selected"),
    "runs_app/interrupt": ("interrupt", "approve"),
    "effects_app/effectrecord": ("effect", "mark_not_applied"),
    "memory_app/memoryentry": ("memory", "delete_selected"),
    "memory_app/memorystats": ("memory_stats", "delete_selected"),
    "schedules_app/schedule": ("schedule", "pause_schedules"),
    "schedules_app/schedulefire": ("schedule_fire", "delete_selected"),
    "webhooks_app/webhooksubscription": ("webhook", "disable_webhooks"),
    "webhooks_app/webhookdelivery": ("delivery", "redeliver"),
    "webhooks_app/webhookattempt": ("webhook_attempt", "delete_selected"),
    "retention_app/retentionpolicy": ("retention_policy", "apply_policies"),
    "retention_app/retentionpass": ("retention_pass", "delete_selected"),
}
#: Django's own history view looks the row up before it checks the model permission, and the
#: stock user and group admins are not tenant-scoped (users and groups belong to no tenant):
#: staff without auth permissions get a 403 for an existing user or group id and "not found" for
#: a missing one. It tells that a platform user id exists, never whose or which tenant's.
AUTH_HISTORY_ORACLE = "Django's history_view checks existence before permission (auth models)"
#: Rows B has of its own (its tenant, project, membership, token).
B_OWN_ROWS = ("tenant", "project", "membership", "token")
ADMIN_APP_LABELS = (
    "auth",
    "tenancy",
    "sessions_app",
    "runs_app",
    "effects_app",
    "memory_app",
    "schedules_app",
    "webhooks_app",
    "retention_app",
)
#: A change or add form as the admin would post it (each model's form takes what it knows).
ADMIN_FORM = {
    "tenant": "{tenant}",
    "project": "{project}",
    "slug": "iso-admin",
    "name": "iso",
    "title": "iso",
    "user": "{user}",
    "role": "admin",
    "username": "iso-admin-user",
    "revoked_at": "",
    "expires_at": "",
}


def _admin_table() -> dict[str, list[Page]]:
    a = django_settings.ADMIN_PATH
    table: dict[str, list[Page]] = {
        a: [Page(PAGE, "GET", ADMIN)],
        f"{a}password_change/": [Page(SELF, "GET", f"{ADMIN}password_change/")],
        f"{a}password_change/done/": [Page(SELF, "GET", f"{ADMIN}password_change/done/")],
        f"{a}autocomplete/": [
            Page(
                SELF,
                "GET",
                f"{ADMIN}autocomplete/?app_label=tenancy&model_name=membership"
                "&field_name=tenant&term=a",
                viewer=None,
            )
        ],
        f"{a}jsi18n/": [Page(SELF, "GET", f"{ADMIN}jsi18n/")],
        f"{a}r/<path:content_type_id>/<path:object_id>/": [
            Page(OBJECT, "GET", f"{ADMIN}r/{{run_type}}/{{run}}/", target="run", viewer=404),
        ],
        f"{a}^(?P<app_label>{'|'.join(ADMIN_APP_LABELS)})/$": [
            Page(PAGE, "GET", f"{ADMIN}{label}/", viewer=404 if label == "auth" else 200)
            for label in ADMIN_APP_LABELS
        ],
        f"{a}(?P<url>.*)$": [
            # No trailing slash: the catch-all redirects to the object's URL, in scope or not.
            Page(OBJECT, "GET", f"{ADMIN}runs_app/run/{{run}}", target="run", viewer=301),
            Page(SELF, "GET", f"{ADMIN}no-such-page/", viewer=404),
        ],
        f"{a}auth/user/<id>/password/": [
            Page(OBJECT, "GET", f"{ADMIN}auth/user/{{user}}/password/", "user", viewer=403),
            Page(
                ACTION,
                "POST",
                f"{ADMIN}auth/user/{{user}}/password/",
                target="user",
                body={"password1": "iso-Pa55word!", "password2": "iso-Pa55word!"},
                viewer=403,
            ),
        ],
    }
    for model, (key, action) in ADMIN_MODELS.items():
        auth = model.startswith("auth/")
        base, obj = f"{ADMIN}{model}/", f"{ADMIN}{model}/{{{key}}}/"
        selected = {
            "action": action,
            "_selected_action": [f"{{{key}}}"],
            "apply": "yes",
            "post": "yes",
            "reason": "iso",
        }
        table[f"{a}{model}/"] = [
            Page(PAGE, "GET", base, viewer=403 if auth else 200),
            Page(ACTION, "POST", base, key, selected, viewer=403 if auth else None),
            # A forged selection that is no primary key: nothing selected, not a 500.
            Page(
                ACTION,
                "POST",
                base,
                "",
                {**selected, "_selected_action": ["no-such-row"]},
                viewer=403 if auth else None,
            ),
        ]
        table[f"{a}{model}/add/"] = [
            Page(PAGE, "GET", f"{base}add/", viewer=403),
            Page(ACTION, "POST", f"{base}add/", "tenant", ADMIN_FORM, viewer=403),
        ]
        table[f"{a}{model}/<path:object_id>/history/"] = [
            Page(
                OBJECT,
                "GET",
                f"{obj}history/",
                key,
                viewer=403 if auth else 200,
                oracle=AUTH_HISTORY_ORACLE if auth else "",
            ),
        ]
        table[f"{a}{model}/<path:object_id>/delete/"] = [
            Page(OBJECT, "GET", f"{obj}delete/", key, viewer=403),
            Page(ACTION, "POST", f"{obj}delete/", key, {"post": "yes"}, viewer=403),
        ]
        table[f"{a}{model}/<path:object_id>/change/"] = [
            Page(OBJECT, "GET", f"{obj}change/", key, viewer=403 if auth else 200),
            Page(ACTION, "POST", f"{obj}change/", key, ADMIN_FORM, viewer=403),
        ]
        if key in B_OWN_ROWS:
            # B's staff on B's own row: its form's choices must not list A's rows either.
            table[f"{a}{model}/<path:object_id>/change/"].append(
                Page(SELF, "GET", f"{base}{{own_{key}}}/change/", viewer=302)
            )
        table[f"{a}{model}/<path:object_id>/"] = [
            Page(OBJECT, "GET", obj, key, viewer=302),
        ]
    return table


ADMIN_TABLE = _admin_table()

# --- WebSocket -------------------------------------------------------------------------------

#: Each stream: (the placeholder of A's object, the path).
WS_TABLE: dict[str, tuple[str, str]] = {
    "ws/sessions/<uuid:session_id>/": ("session", "/ws/sessions/{session}/"),
    "ws/runs/<uuid:run_id>/": ("run", "/ws/runs/{run}/"),
}


# --- Helpers ---------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def fill(template: Any, values: dict[str, str]) -> Any:
    """The template with every ``{name}`` replaced by its value (in strings, lists, dicts)."""
    if isinstance(template, str):
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
    if isinstance(template, dict):
        return {fill(key, values): fill(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(value, values) for value in template]
    return template


def inputs_of(op: Api | Page, values: dict[str, str]) -> list[str]:
    """The values the caller itself sent in this operation (an answer may echo them)."""
    names = set(_PLACEHOLDER.findall(op.path + repr(op.body)))
    return sorted((values[n] for n in names), key=len, reverse=True)


def with_random_target(target: str, values: dict[str, str]) -> dict[str, str]:
    return {**values, target: random_like(values[target])}


def difference(mine: bytes, theirs: bytes) -> str:
    """Where two bodies part: a little of each from the first differing byte."""
    if mine == theirs:
        return "are the same"
    at = next(
        (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
        min(len(mine), len(theirs)),
    )
    start = max(0, at - 80)
    return f"differ at {at}: {mine[start : at + 200]!r} / {theirs[start : at + 200]!r}"


class Failures(list[str]):
    """Every failure of a sweep, reported together (one route's failure hides no other's)."""

    def check(self, condition: bool, message: str) -> bool:
        if not condition:
            self.append(message)
        return condition

    def report(self) -> str:
        return f"{len(self)} isolation failure(s):\n" + "\n".join(f"- {f}" for f in self)


@contextmanager
def unchanged(failures: Failures, label: str, *, audit_success: bool = False) -> Iterator[None]:
    """The block's requests leave every table as it was, and (unless ``audit_success``) the
    audit log gains no success row."""
    before, mark = fingerprint(), audit_watermark()
    yield
    changed = fingerprint_diff(before, fingerprint())
    failures.check(not changed, f"{label}: a refused request changed {changed}")
    successes = [] if audit_success else audit_successes_since(mark)
    failures.check(not successes, f"{label}: a refused request was audited as done {successes}")


@contextmanager
def nothing_checked() -> Iterator[None]:
    yield


def guarded(failures: Failures, label: str, op: Api | Page, **kwargs: Any) -> Any:
    """:func:`unchanged` around a write (POST, PATCH, DELETE), nothing around a GET."""
    return unchanged(failures, label, **kwargs) if op.method != "GET" else nothing_checked()


def check_answer(
    failures: Failures,
    label: str,
    call: Callable[[dict[str, str]], Any],
    op: Api | Page,
    values: dict[str, str],
    expected: int,
    markers: list[str],
    *,
    compare: bool,
) -> Any:
    """One request: its status; none of ``markers`` (A's data) in the answer but what the caller
    sent itself; with ``compare``, the answer for a random target is the same, byte for byte."""
    response = call(values)
    status = response.status_code
    if not failures.check(status == expected, f"{label}: {status}, expected {expected}"):
        failures.append(f"    {response.content[:300]!r}")
        return response
    own_inputs = inputs_of(op, values)
    if markers:
        found = leaked(response.content, [m for m in markers if m not in own_inputs], *own_inputs)
        failures.check(not found, f"{label}: the answer holds A's {found}")
    if compare and op.target:
        other_values = with_random_target(op.target, values)
        other = call(other_values)
        other_inputs = inputs_of(op, other_values)
        mine = (
            status,
            normalized(response.get("Location", ""), *own_inputs),
            normalized(response.content, *own_inputs),
        )
        theirs = (
            other.status_code,
            normalized(other.get("Location", ""), *other_inputs),
            normalized(other.content, *other_inputs),
        )
        failures.check(
            mine == theirs,
            f"{label}: A's object answers {mine[:2]}, a missing one {theirs[:2]}; the bodies "
            f"{difference(mine[2], theirs[2])}",
        )
    return response


@dataclass(frozen=True)
class Answer:
    """An admin answer with the messages it left for the next page (the admin says "not found"
    in a message after a redirect): they are compared and searched like the body."""

    status_code: int
    content: bytes
    headers: dict[str, str]

    def get(self, key: str, default: Any = None) -> Any:
        return self.headers.get(key, default)

    def __getitem__(self, key: str) -> str:
        return self.headers[key]


def with_messages(client: Client, response: Any) -> Answer:
    texts = [str(m.message) for m in get_messages(response.wsgi_request)]
    client.cookies.pop("messages", None)  # shown once: here, not on the next page
    body = response.content + "\n".join(["", "<messages>", *texts]).encode()
    return Answer(response.status_code, body, dict(response.items()))


def logged_in(user: Any = None) -> Client:
    """A client of the sweep (logged in as ``user``): a 500 is an answer to report with the
    others, not an exception that ends the sweep."""
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def quiet(settings, tmp_path):
    """No write rate limit in the way; artifacts in a temporary directory."""
    settings.OPENRATH_RATE_LIMIT_BURST = 0
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the webhook control's loopback target
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "artifacts")},
        },
    }
    local_buckets.clear()


@pytest.fixture
def other_tenant_rows(foreign_project, quiet) -> OtherTenantRows:
    """B's own retention policy and pass, there before the outsiders' "before" answers."""
    return build_other_tenant_rows(foreign_project)


@pytest.fixture
def make_world(
    registry,  # noqa: F811
    tenant,
    project,
    other_project,
    other_tenant,
    foreign_project,
    quiet,
    other_tenant_rows,
):
    """Builds tenant A's objects when called: after the outsiders' "before" answers."""

    def make() -> World:
        return build_world(
            registry,
            tenant=tenant,
            project=project,
            other_project=other_project,
            other_tenant=other_tenant,
            foreign_project=foreign_project,
        )

    return make


# --- 1. Every route is in a table ------------------------------------------------------------


def test_every_route_is_swept_or_public():
    covered: dict[str, frozenset[str] | None] = {
        route: frozenset(op.method for op in ops) for route, ops in API_TABLE.items()
    }
    for table in (CONSOLE_TABLE, ADMIN_TABLE):
        covered.update(dict.fromkeys(table))
    served = http_routes()
    problems = coverage_problems(served, covered, PUBLIC)
    problems += coverage_problems(websocket_routes(), dict.fromkeys(WS_TABLE), {})
    assert not problems, "\n".join(problems)
    # Every part of the site is in the walk (the includes were followed).
    assert {p.split("/")[0] for p in served} == {
        "healthz",
        "readyz",
        "metrics",
        "api",
        "console",
        "favicon.ico",
        django_settings.ADMIN_PATH.strip("/"),
    }
    assert len(served) == len(covered) + len(PUBLIC)


# --- 2. The HTTP API -------------------------------------------------------------------------


def _api_call(client: APIClient, op: Api, values: dict[str, str]) -> Any:
    path = fill(op.path, values)
    if op.method == "GET":
        return client.get(path)
    if op.method == "DELETE":
        return client.delete(path)
    send = client.patch if op.method == "PATCH" else client.post
    return send(path, fill(op.body, values), format="json")


def _api_values(world: World, own_project: Project) -> dict[str, str]:
    return {
        **world.ids,
        "own_project": str(own_project.id),
        "export": world.export_jsonl,
        "audit_note": f"{SECRET}-AUDIT",
    }


def _api_ops() -> list[tuple[str, Api]]:
    """Every operation, lists first: an outsider's audit trail soon records its own probes of
    A's ids (its own input, but the list would no longer be what it was before)."""
    ops = [(route, op) for route, ops in API_TABLE.items() for op in ops]
    return sorted(ops, key=lambda item: item[1].kind != LIST)


ERROR_CODES = {401: "not_authenticated", 403: "permission_denied", 404: "not_found"}


@pytest.mark.django_db(transaction=True)
def test_api_isolation(make_world, tenant, project, other_project, other_tenant, foreign_project):
    tokens = make_tokens(
        tenant=tenant, project=project, other_project=other_project, other_tenant=other_tenant
    )
    clients = {name: APIClient(raise_request_exception=False) for name in (*PRINCIPALS, "owner")}
    for name in (*PRINCIPALS[1:], "owner"):
        clients[name].credentials(HTTP_AUTHORIZATION=f"Bearer {getattr(tokens, name)}")
    # The project each principal names as "its own" in a body that also names A's session.
    own = dict.fromkeys((*PRINCIPALS, "owner"), project)
    own.update(other_tenant=foreign_project, other_project=other_project)
    before = {
        (name, op.path): normalized(clients[name].get(op.path).content)
        for _, op in _api_ops()
        if op.kind == LIST
        for name in OUTSIDERS
    }
    world = make_world()
    markers = {
        "other_tenant": world.markers(),
        # Tenant A and the project it may see are the limited token's own.
        "other_project": world.markers(
            str(tenant.id), tenant.slug, tenant.name, str(other_project.id)
        ),
    }
    failures = Failures()

    for route, op in _api_ops():
        expected = dict(zip(PRINCIPALS, API_EXPECT[op.kind], strict=True))
        if op.viewer is not None:
            expected["viewer"] = op.viewer
        for name in PRINCIPALS:
            values = _api_values(world, own[name])
            label = f"{op.method} {op.path} ({route}) as {name}"

            def call(v: dict[str, str], client: APIClient = clients[name], op: Api = op) -> Any:
                return _api_call(client, op, v)

            if op.kind == PROJECT_CREATE and name == "other_tenant":
                _check_own_project_create(failures, label, call, values, tenant, other_tenant)
                continue
            # A recall is a read sent by POST: audited as done, and it changes nothing.
            with guarded(failures, label, op, audit_success=op.kind == RECALL):
                response = check_answer(
                    failures,
                    label,
                    call,
                    op,
                    values,
                    expected[name],
                    markers.get(name, []),
                    compare=name in OUTSIDERS or expected[name] == 403,
                )
            if response.status_code >= 400:
                code = error_of(response)["code"]
                failures.check(
                    code == ERROR_CODES.get(response.status_code), f"{label}: error {code}"
                )
            if name in OUTSIDERS and op.kind == LIST:
                failures.check(
                    normalized(response.content) == before[(name, op.path)],
                    f"{label}: the list answers differently now that A has objects: "
                    f"{response.content[:300]!r}",
                )
        if op.kind not in WRITES:
            _check_owner_read(failures, clients, op, _api_values(world, project))

    # The controls: A's owner sends every refused write, with the same body, and it is done.
    writes = [(route, op) for route, op in _api_ops() if op.kind in WRITES]
    for route, op in sorted(writes, key=lambda item: item[1].control):
        response = _api_call(clients["owner"], op, _api_values(world, project))
        failures.check(
            response.status_code in op.ok,
            f"control: {op.method} {op.path} ({route}) as A's owner: {response.status_code} "
            f"{response.content[:300]!r}",
        )
    assert not failures, failures.report()


def _check_own_project_create(
    failures: Failures,
    label: str,
    call: Callable[[dict[str, str]], Any],
    values: dict[str, str],
    tenant: Any,
    other_tenant: Any,
) -> None:
    """B may create a project in B (whatever A has): it lands in B and A is untouched."""
    a_projects = list(Project.objects.filter(tenant=tenant).order_by("id").values_list())
    response = call(values)
    if failures.check(response.status_code == 201, f"{label}: {response.status_code}"):
        created = Project.objects.get(id=response.json()["id"])
        failures.check(created.tenant_id == other_tenant.id, f"{label}: created outside B")
    after = list(Project.objects.filter(tenant=tenant).order_by("id").values_list())
    failures.check(after == a_projects, f"{label}: A's projects changed")


def _check_owner_read(
    failures: Failures, clients: dict[str, APIClient], op: Api, values: dict[str, str]
) -> None:
    """A's owner reads what the outsiders could not (and A's viewer sees A's rows listed)."""
    owner = _api_call(clients["owner"], op, values)
    label = f"{op.method} {op.path}"
    failures.check(owner.status_code == 200, f"{label} as A's owner: {owner.status_code}")
    if op.sees:
        viewer = _api_call(clients["viewer"], op, values)
        for name, response in (("owner", owner), ("viewer", viewer)):
            failures.check(
                values[op.sees] in response.content.decode(),
                f"{label} as A's {name}: A's {op.sees} is not in {response.content[:300]!r}",
            )
    if op.kind == CATALOGUE:
        for name in (*OUTSIDERS, "viewer"):
            failures.check(
                _api_call(clients[name], op, values).content == owner.content,
                f"{label} as {name}: not the catalogue A's owner sees",
            )


# --- 3. The console --------------------------------------------------------------------------


def _page_call(client: Client, op: Page, values: dict[str, str]) -> Any:
    path = fill(op.path, values)
    if op.method == "GET":
        return client.get(path)
    return client.post(path, fill(op.body, values))


def _page_ops(table: dict[str, list[Page]]) -> list[tuple[str, Page]]:
    """Every operation, pages first (as :func:`_api_ops`)."""
    ops = [(route, op) for route, ops in table.items() for op in ops]
    return sorted(ops, key=lambda item: item[1].kind != PAGE)


@pytest.mark.django_db(transaction=True)
def test_console_isolation(make_world, other_tenant):
    outsider = logged_in(other_tenant_users(other_tenant)["user"])
    before = {
        op.path: normalized(outsider.get(op.path).content)
        for _, op in _page_ops(CONSOLE_TABLE)
        if op.kind == PAGE
    }
    world = make_world()
    markers = world.markers()
    values = {**world.ids, "tenant_slug": world.tenant.slug}
    anonymous, viewer = logged_in(), logged_in(world.users["viewer"])
    failures = Failures()

    for route, op in _page_ops(CONSOLE_TABLE):
        label = f"{op.method} {op.path} ({route})"

        def call(v: dict[str, str], client: Client, op: Page = op) -> Any:
            return _page_call(client, op, v)

        # Anonymous: a page sends to the login; an action is a 401 (not a redirect that the
        # audit trail would record as done).
        with guarded(failures, f"{label} anonymous", op):
            response = call(values, anonymous)
        if op.method == "GET":
            failures.check(
                response.status_code == 302
                and response["Location"].startswith("/console/login/?next="),
                f"{label} anonymous: {response.status_code} {response.get('Location')}",
            )
        else:
            failures.check(
                response.status_code == 401, f"{label} anonymous: {response.status_code}"
            )

        # B's admin: nothing of A; A's objects are exactly as missing as missing ones.
        with guarded(failures, f"{label} as B's admin", op):
            response = check_answer(
                failures,
                f"{label} as B's admin",
                lambda v, op=op: call(v, outsider, op),
                op,
                values,
                200 if op.kind == PAGE else op.outsider,
                markers,
                compare=op.kind != PAGE,
            )
        if op.kind == PAGE:
            failures.check(
                normalized(response.content) == before[op.path],
                f"{label} as B's admin: the page changed now that A has objects: "
                f"{difference(before[op.path], normalized(response.content))}",
            )

        # A's viewer: reads A's objects; every action is a 403 (for A's object as for none).
        with nothing_checked() if op.kind != ACTION else unchanged(failures, f"{label} viewer"):
            response = check_answer(
                failures,
                f"{label} as A's viewer",
                lambda v, op=op: call(v, viewer, op),
                op,
                values,
                op.viewer or 200,
                [],
                compare=op.viewer == 403 and not op.viewer_knows_target,
            )
        if op.kind == OBJECT and op.outsider == 404:
            failures.check(
                values[op.target] in response.content.decode(),
                f"{label} as A's viewer: A's object is not shown",
            )

    # The controls: A's admin posts each refused action, with the same form, and it is done.
    admin = logged_in(world.users["admin"])
    actions = [(route, op) for route, op in _page_ops(CONSOLE_TABLE) if op.kind == ACTION]
    for route, op in sorted(actions, key=lambda item: item[1].control):
        response = _page_call(admin, op, values)
        failures.check(
            response.status_code in op.ok,
            f"control: {op.method} {op.path} ({route}) as A's admin: {response.status_code}",
        )
    assert not failures, failures.report()


# --- 4. The admin ----------------------------------------------------------------------------

#: The admin answers a refused write with a redirect (to its login, or to its index when the row
#: is not found), which the audit middleware records as a success: for the admin only the
#: database is checked (noted in the sweep's report, not changed here).
ADMIN_AUDITS_REFUSALS_AS_DONE = True


def _admin_values(world: World, b_staff: Any, b_token: Any) -> dict[str, str]:
    viewer = world.users["viewer"]
    return {
        **world.ids,
        "user": str(viewer.pk),
        "group": str(Group.objects.get(name="iso-group").pk),
        "membership": str(Membership.objects.get(user=viewer).pk),
        "chunk": str(Chunk.objects.filter(session=world.session).order_by("pk")[0].pk),
        "edge": str(LineageEdge.objects.get(child=world.fork).pk),
        "run_event": str(RunEvent.objects.filter(run=world.waiting_run).order_by("pk")[0].pk),
        "checkpoint": str(Checkpoint.objects.filter(run=world.review_run).order_by("pk")[0].pk),
        "memory_stats": str(MemoryStats.objects.get(project=world.project).pk),
        "run_type": str(ContentType.objects.get_for_model(Run).pk),
        "own_tenant": str(world.other_tenant.pk),
        "own_project": str(world.foreign_project.pk),
        "own_membership": str(Membership.objects.get(user=b_staff).pk),
        "own_token": str(b_token.pk),
    }


@pytest.mark.django_db(transaction=True)
def test_admin_isolation(make_world, other_tenant):
    b_staff = other_tenant_users(other_tenant)["staff"]
    b_token = token_create(tenant=other_tenant, name="iso-b-token", grants=["runs:read"])[0]
    Group.objects.create(name="iso-group")
    outsider = logged_in(b_staff)
    before = {}
    for _, op in _page_ops(ADMIN_TABLE):
        if op.kind == PAGE:
            response = with_messages(outsider, outsider.get(op.path))
            before[op.path] = (response.status_code, normalized(response.content))
    world = make_world()
    markers = world.markers()
    values = _admin_values(world, b_staff, b_token)
    anonymous, non_staff = logged_in(), logged_in(world.users["viewer"])
    viewer = logged_in(world.users["staff_viewer"])
    failures = Failures()

    def refused(label: str, op: Page) -> Any:
        return guarded(failures, label, op, audit_success=ADMIN_AUDITS_REFUSALS_AS_DONE)

    for route, op in _page_ops(ADMIN_TABLE):
        label = f"{op.method} {op.path} ({route}, target {op.target or 'none'})"

        def call(v: dict[str, str], client: Client, op: Page = op) -> Any:
            return with_messages(client, _page_call(client, op, v))

        # Anonymous, and a console login without staff status: the admin's login page.
        for name, client in (("anonymous", anonymous), ("non-staff", non_staff)):
            with refused(f"{label} {name}", op):
                response = call(values, client)
            failures.check(
                response.status_code == 302
                and response["Location"].startswith(f"{ADMIN}login/?next="),
                f"{label} {name}: {response.status_code} {response.get('Location')}",
            )

        # B's staff (every model permission of the project's apps, admin of B): nothing of A
        # anywhere; A's rows answer exactly like rows that do not exist.
        with refused(f"{label} as B's staff", op):
            response = call(values, outsider)
            failures.check(response.status_code < 500, f"{label} as B's staff: 5xx")
            own_inputs = inputs_of(op, values)
            found = leaked(response.content, [m for m in markers if m not in own_inputs])
            failures.check(not found, f"{label} as B's staff: the answer holds A's {found}")
            if op.kind == PAGE:
                now = (response.status_code, normalized(response.content))
                failures.check(
                    now == before[op.path],
                    f"{label} as B's staff: the page changed now that A has objects: "
                    f"{before[op.path][0]} -> {now[0]}, {difference(before[op.path][1], now[1])}",
                )
            if op.target and op.kind in (OBJECT, ACTION) and not op.oracle:
                check_answer(
                    failures,
                    f"{label} as B's staff",
                    lambda v, op=op: call(v, outsider, op),
                    op,
                    values,
                    response.status_code,
                    [],
                    compare=True,
                )

        # A's view-only staff: reads A's rows; every write is refused.
        with refused(f"{label} as A's view-only staff", op):
            response = call(values, viewer)
        failures.check(
            response.status_code == op.viewer
            if op.viewer is not None
            else response.status_code < 500,
            f"{label} as A's view-only staff: {response.status_code}, expected {op.viewer}",
        )
        if op.kind == OBJECT and op.viewer == 200:
            failures.check(
                values[op.target] in response.content.decode(),
                f"{label} as A's view-only staff: A's row is not shown",
            )
    assert not failures, failures.report()


def _options(body: str, name: str) -> set[str]:
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', body, re.S)
    assert select is not None, f"no select {name!r}"
    return set(re.findall(r'<option value="([^"]+)"', select.group(1)))


@pytest.mark.django_db(transaction=True)
def test_admin_forms_offer_only_the_staff_members_tenants(make_world, other_tenant):
    """Found by the sweep: a token's form listed every tenant's projects (named by tenant id
    and slug) and every user, and a raw-id user input named any user by id."""
    users = other_tenant_users(other_tenant)
    b_token = token_create(tenant=other_tenant, name="iso-b-token", grants=["runs:read"])[0]
    world = make_world()
    staff = logged_in(users["staff"])
    body = staff.get(f"{ADMIN}tenancy/apitoken/{b_token.pk}/change/").content.decode()
    # A token's scope and creator are shown, not chosen (they change through the services).
    assert 'name="projects"' not in body
    assert 'name="created_by"' not in body
    assert not leaked(body.encode(), world.markers())
    project_form = staff.get(f"{ADMIN}tenancy/project/add/").content.decode()
    assert _options(project_form, "tenant") == {str(other_tenant.id)}
    a_user = world.users["viewer"]
    form = staff.get(f"{ADMIN}tenancy/membership/add/?user={a_user.pk}").content.decode()
    assert a_user.username not in form
    own = staff.get(f"{ADMIN}tenancy/membership/add/?user={users['user'].pk}").content.decode()
    assert users["user"].username in own
    # Nor can B's admin pull A's user into B by its id.
    before = Membership.objects.count()
    refused = staff.post(
        f"{ADMIN}tenancy/membership/add/",
        {"user": a_user.pk, "tenant": other_tenant.pk, "role": "viewer"},
    )
    assert refused.status_code == 200
    assert a_user.username not in refused.content.decode()
    assert Membership.objects.count() == before


def _owners() -> dict[str, list[tuple[Any, ...]]]:
    """Every row's owner (its tenant and project columns), a token's projects and a
    membership's user: what no admin write may move (audit rows are checked apart: each
    request adds its own)."""
    found = {}
    for model in owned_models():
        if model is AuditEvent:
            continue
        key = ("entry_id", "term") if model is MemoryTerm else ("pk",)  # a composite key
        columns = [
            f.attname for f in model._meta.concrete_fields if f.column in owner_columns(model)
        ]
        found[model._meta.label] = sorted(model._base_manager.values_list(*key, *columns))
    found["token_projects"] = sorted(
        ApiToken.projects.through.objects.values_list("apitoken_id", "project_id")
    )
    found["membership_users"] = sorted(Membership.objects.values_list("pk", "user_id"))
    return found


@pytest.mark.django_db(transaction=True)
def test_admin_writes_cannot_move_rows_into_another_tenant(make_world, other_tenant):
    """The red-team's path: staff who administer B and only view A post B's rows' change forms
    (and every add form) naming A's tenant, project and users. Every admin model is posted;
    no row may change its owner or appear in A, and A's audit log gains no success."""
    users = other_tenant_users(other_tenant)
    b_token = token_create(tenant=other_tenant, name="iso-b-token", grants=["*"])[0]
    Group.objects.create(name="iso-group")
    world = make_world()
    values = {
        **_admin_values(world, users["staff"], b_token),
        "user": str(world.users["viewer"].pk),
    }
    MembershipFactory(user=users["staff"], tenant=world.tenant, role="viewer")
    staff = logged_in(users["staff"])
    form = {
        **fill(ADMIN_FORM, values),
        "projects": [values["project"]],
        "grants": '["*"]',
        "expires_at_0": "2999-01-01",
        "expires_at_1": "00:00:00",
    }
    own = {
        "tenancy/tenant": values["own_tenant"],
        "tenancy/project": values["own_project"],
        "tenancy/membership": values["own_membership"],
        "tenancy/apitoken": values["own_token"],
    }
    before, mark = _owners(), audit_watermark()
    failures = Failures()
    for model in ADMIN_MODELS:
        targets = [f"{ADMIN}{model}/add/"]
        if model in own:
            targets.append(f"{ADMIN}{model}/{own[model]}/change/")
        for url in targets:
            response = staff.post(url, form)
            failures.check(response.status_code < 500, f"POST {url}: {response.status_code}")
    moved = fingerprint_diff(before, _owners())
    failures.check(not moved, f"admin writes moved or planted rows: {moved}")
    in_a = AuditEvent.objects.filter(id__gt=mark, tenant=world.tenant, outcome="success")
    failures.check(
        not in_a.exists(), f"audited as done in A: {list(in_a.values_list('action', flat=True))}"
    )
    assert not failures, failures.report()
    # The control: B's own rows are still B's to edit (the forms above were valid for B).
    renamed = staff.post(
        f"{ADMIN}tenancy/project/{own['tenancy/project']}/change/",
        {"slug": world.foreign_project.slug, "name": "renamed by B"},
    )
    assert renamed.status_code == 302
    assert Project.objects.get(pk=world.foreign_project.pk).name == "renamed by B"


# --- 5. WebSocket streams --------------------------------------------------------------------


def _bearer(raw: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {raw}".encode())]


def _browser(user: Any) -> list[tuple[bytes, bytes]]:
    """A console login's handshake: its session cookie, from an allowed origin."""
    cookie = f"sessionid={logged_in(user).cookies['sessionid'].value}".encode()
    return [(b"origin", b"http://localhost"), (b"cookie", cookie)]


async def _handshake(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[bool, Any, list[Any]]:
    """``(accepted, close code or subprotocol, frames received)``; an accepted stream is read
    up to its ``ready`` frame, a refused one must have sent nothing."""
    communicator = WebsocketCommunicator(application, path, headers=headers)
    accepted, detail = await communicator.connect(timeout=10)
    frames: list[Any] = []
    try:
        if accepted:
            while not frames or frames[-1].get("type") != "ready":
                frames.append(await communicator.receive_json_from(timeout=10))
        elif not await communicator.receive_nothing(timeout=0.05):
            frames.append(await communicator.receive_output(timeout=1))
    finally:
        await communicator.disconnect()
    return accepted, detail, frames


@pytest.mark.django_db(transaction=True)
def test_websocket_isolation(make_world, tenant, project, other_project, other_tenant):
    tokens = make_tokens(
        tenant=tenant, project=project, other_project=other_project, other_tenant=other_tenant
    )
    b_admin = other_tenant_users(other_tenant)["user"]
    world = make_world()
    refusals = [  # close codes of docs/streaming.md
        ("anonymous", [], 4401),
        ("a revoked token of A", _bearer(tokens.revoked), 4401),
        ("B's token with every grant", _bearer(tokens.other_tenant), 4404),
        ("A's token of another project", _bearer(tokens.other_project), 4404),
        ("B's console login", _browser(b_admin), 4404),
    ]
    readers = [
        ("A's viewer token", _bearer(tokens.viewer)),
        ("A's viewer login", _browser(world.users["viewer"])),
    ]
    failures = Failures()
    try:
        for route, (key, template) in WS_TABLE.items():
            path = fill(template, world.ids)
            missing = fill(template, with_random_target(key, world.ids))
            for name, headers, code in refusals:
                label = f"WS {route} as {name}"
                answer = async_to_sync(_handshake)(path, headers)
                failures.check(answer == (False, code, []), f"{label}: {answer}")
                other = async_to_sync(_handshake)(missing, headers)
                failures.check(
                    other == answer, f"{label}: a missing object gets {other}, A's {answer}"
                )
            for name, headers in readers:
                accepted, _, frames = async_to_sync(_handshake)(path, headers)
                failures.check(
                    accepted and len(frames) > 1,  # A's chunks or events, then "ready"
                    f"WS {route} as {name}: accepted={accepted} frames={frames[:3]}",
                )
    finally:
        close_db_pool()  # the consumers' database threads keep their connections
    assert not failures, failures.report()


# --- 6. The public routes --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_public_routes_hold_no_tenant_data(make_world, settings):
    """The allowlisted routes answer without a login, and nothing they say is A's."""
    world = make_world()
    markers = world.markers()
    requests = {
        "healthz": ("GET", "/healthz"),
        "readyz": ("GET", "/readyz"),
        "metrics": ("GET", "/metrics"),
        "api/v1/schema/": ("GET", "/api/v1/schema/"),
        "api/v1/docs/": ("GET", "/api/v1/docs/"),
        "console/login/": ("GET", "/console/login/"),
        "console/logout/": ("POST", "/console/logout/"),
        "favicon.ico": ("GET", "/favicon.ico"),
        f"{django_settings.ADMIN_PATH}login/": ("GET", f"{ADMIN}login/"),
        f"{django_settings.ADMIN_PATH}logout/": ("POST", f"{ADMIN}logout/"),
    }
    assert set(requests) == set(PUBLIC)
    anonymous = Client()
    failures = Failures()
    for method, path in requests.values():
        response = anonymous.get(path) if method == "GET" else anonymous.post(path)
        body = b"".join(response) if response.streaming else response.content
        failures.check(response.status_code < 400, f"{method} {path}: {response.status_code}")
        found = leaked(body, markers)
        failures.check(not found, f"{method} {path}: the answer holds A's {found}")
    # /metrics outside the allowed networks is refused (the test client is 127.0.0.1).
    settings.OPENRATH_METRICS_ALLOWED_CIDRS = ["10.0.0.0/8"]
    refused = anonymous.get("/metrics")
    failures.check(refused.status_code == 403, f"GET /metrics from outside: {refused.status_code}")
    assert not failures, failures.report()


# --- 7. Retention: B's own policy reaches nothing of A ---------------------------------------


def _removed_nothing(body: dict[str, Any]) -> bool:
    return all(m["count"] == 0 for m in body["removed"].values()) and not any(
        body["sample"].values()
    )


@pytest.mark.django_db(transaction=True)
def test_another_tenants_retention_reaches_nothing_of_a(
    make_world, other_tenant_rows, tenant, project, other_project, other_tenant, foreign_project
):
    """B's policy would remove everything B has (B has nothing else): its dry runs, its pass
    log and its applies (the API's, the console's, the admin's, and a pass ten years on that
    also sweeps artifacts) see and remove nothing of A's, and show only B's own rows."""
    tokens = make_tokens(
        tenant=tenant, project=project, other_project=other_project, other_tenant=other_tenant
    )
    b_users = other_tenant_users(other_tenant)
    world = make_world()
    markers = world.markers()
    own = str(other_tenant_rows.policy.id)
    b = APIClient(raise_request_exception=False)
    b.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens.other_tenant}")
    before = fingerprint()
    a_retention = (
        sorted(RetentionPolicy.objects.unscoped().filter(tenant=tenant).values_list()),
        sorted(RetentionPass.objects.unscoped().filter(tenant=tenant).values_list()),
    )
    failures = Failures()

    def answered(label: str, response: Any, status: int) -> Any:
        failures.check(
            response.status_code == status,
            f"{label}: {response.status_code}, expected {status}: {response.content[:300]!r}",
        )
        found = leaked(response.content, markers)
        failures.check(not found, f"{label}: the answer holds A's {found}")
        is_json = str(response.get("Content-Type", "")).startswith("application/json")
        return response.json() if response.status_code == status and is_json else None

    listed = answered("B lists its policies", b.get("/api/v1/retention/"), 200)
    if listed is not None:
        failures.check([p["id"] for p in listed["results"]] == [own], f"B lists {listed}")
    passes = answered("B's pass log", b.get(f"/api/v1/retention/{own}/passes/"), 200)
    if passes is not None:
        failures.check(
            [p["id"] for p in passes["results"]] == [other_tenant_rows.passed.id],
            f"B's pass log holds {passes['results']}",
        )
    draft = {"project": str(foreign_project.id), "runs_keep_last": 0, "sessions_keep_last": 0}
    for label, response in (
        ("B's dry run", b.get(f"/api/v1/retention/{own}/preview/")),
        ("B's draft dry run", b.post("/api/v1/retention/preview/", draft, format="json")),
        ("B's apply", b.post(f"/api/v1/retention/{own}/apply/")),
    ):
        report = answered(label, response, 200)
        if report is not None:
            failures.check(_removed_nothing(report), f"{label} removes {report}")

    console = logged_in(b_users["user"])
    dry_run = console.get(f"/console/retention/{own}/preview/")
    answered("B's console dry run", dry_run, 200)
    counts = re.findall(
        r'data-kind="\w+"><td>\w+</td><td class="mono">(\d+)<', dry_run.content.decode()
    )
    failures.check(bool(counts) and set(counts) == {"0"}, f"B's console dry run removes {counts}")
    answered("B's console apply", console.post(f"/console/retention/{own}/apply/"), 302)
    page = console.get("/console/retention/")
    answered("B's console page", page, 200)
    failures.check(own in page.content.decode(), "B's console page does not show B's policy")
    staff = logged_in(b_users["staff"])
    selected = {
        "action": "apply_policies",
        "_selected_action": [own],
        "apply": "yes",
        "post": "yes",
    }
    applied = staff.post(f"{ADMIN}retention_app/retentionpolicy/", selected)
    answered("B's admin apply", with_messages(staff, applied), 302)
    # Ten years on, with B's artifact sweep: A's rows and artifacts are not B's to judge.
    far = timezone.now() + timedelta(days=3650)
    report = retention_services.retention_apply(
        policy=RetentionPolicy.objects.unscoped().get(id=own), trigger="command", now=far
    )
    failures.check(_removed_nothing(report.as_dict()), f"B's pass ten years on: {report}")

    b_passes = RetentionPass.objects.unscoped().filter(policy_id=own).count()
    failures.check(b_passes == 5, f"B's passes: {b_passes}, expected its first and 4 applies")
    changed = set(fingerprint_diff(before, fingerprint()))
    failures.check(
        changed <= {"retention_app.RetentionPolicy", "retention_app.RetentionPass"},
        f"B's retention changed {changed}",
    )
    failures.check(
        a_retention
        == (
            sorted(RetentionPolicy.objects.unscoped().filter(tenant=tenant).values_list()),
            sorted(RetentionPass.objects.unscoped().filter(tenant=tenant).values_list()),
        ),
        "B's retention changed A's policy or passes",
    )
    for digest in (world.session_digest, world.run_digest):
        failures.check(
            artifact_exists(tenant_id=tenant.id, digest=digest), f"A's artifact {digest} is gone"
        )
    assert not failures, failures.report()
