"""Console pages: thin callers of the same scoped selectors and services as the API.

Reads go through the selectors with the user's principal (another tenant's object is a 404
page); actions check the grant first (a viewer's POST is a 403 and changes nothing), call the
one service of the operation, and name the operation for the audit row the middleware writes.
A refused action re-renders its page with the service's own message and status (400, 409).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.staticfiles import finders
from django.contrib.staticfiles.storage import staticfiles_storage
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from effects_app import selectors as effect_selectors
from effects_app.models import RESOLUTIONS, EffectRecord
from effects_app.services import effect_resolve
from openrath_project.api.audit import audit_note
from openrath_project.api.permissions import SESSION_TENANT_KEY
from openrath_project.console import display
from openrath_project.console.access import (
    SESSION_PROJECT_KEY,
    Console,
    console_page,
    login_first,
)
from openrath_project.console.plan_layout import layout
from openrath_project.console.schema_form import (
    JSON_FIELD,
    FieldSpec,
    ResponseForm,
    parse_json,
    parse_response,
    response_form,
)
from openrath_project.errors import Conflict, DomainError, ValidationFailed
from openrath_project.tenancy.selectors import parse_uuid, project_list
from openrath_project.tenancy.services import principal_for_user
from runs_app import registration
from runs_app import selectors as run_selectors
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Interrupt, Run
from runs_app.services import run_cancel, run_resume, run_state_at
from runs_app.transitions import STATUSES, TERMINAL
from sessions_app import selectors as session_selectors
from sessions_app.api.serializers import ChunkOut, LineageEdgeOut, SessionOut
from sessions_app.models import LineageEdge, Session

PAGE_SIZE = 50
QUEUE_SIZE = 100
EVENTS_SHOWN = 200
CHUNKS_SHOWN = 200
CHECKPOINTS_SHOWN = 20
LINEAGE_PAGE = 200
VENDOR_FILES = ("vendor/cytoscape/cytoscape.min.js", "vendor/cytoscape-dagre/cytoscape-dagre.js")


# --- Helpers -------------------------------------------------------------------------------------


@dataclass
class ActionError:
    """A refused action, shown on the page it came from."""

    status: int
    code: str
    message: str
    details: dict[str, Any]
    object_id: str = ""

    @classmethod
    def of(cls, exc: DomainError, object_id: object = "") -> ActionError:
        return cls(exc.status_code, exc.code, exc.message, exc.details, str(object_id))


def _filtered(qs: QuerySet[Any], console: Console) -> QuerySet[Any]:
    return qs.filter(project=console.project) if console.project is not None else qs


def _safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def _refused(request: HttpRequest, exc: DomainError, **details: Any) -> None:
    audit_note(request, details={"error_code": exc.code, **details})


def _base(console: Console, **context: Any) -> dict[str, Any]:
    principal = console.principal
    pending = _filtered(
        run_selectors.interrupt_list(principal=principal).filter(status="pending"), console
    ).count()
    reviews = _filtered(
        effect_selectors.effect_list(principal=principal).filter(status="needs_review"), console
    ).count()
    return {
        "console": console,
        "nav_pending": pending,
        "nav_reviews": reviews,
        "admin_url": "/" + str(settings.ADMIN_PATH),
        **context,
    }


def _keyset(qs: QuerySet[Any], request: HttpRequest) -> tuple[list[Any], str | None]:
    """A page of rows, newest first, older than the row ``before`` names; and the next
    ``before``. Ordered by ``(created_at, id)``: run ids are random, session ids time-ordered."""
    before = parse_uuid(request.GET.get("before"))
    if before is not None:
        anchor = qs.filter(id=before).values_list("created_at", flat=True).first()
        if anchor is not None:
            qs = qs.filter(Q(created_at__lt=anchor) | Q(created_at=anchor, id__lt=before))
    rows = list(qs.order_by("-created_at", "-id")[: PAGE_SIZE + 1])
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    return rows, str(rows[-1].id) if more else None


# --- Login, logout, switcher ---------------------------------------------------------------------


class LoginView(auth_views.LoginView):
    template_name = "console/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        audit_note(request, action="console.login", object_type="user")
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200:  # the form came back: wrong credentials
            response.status_code = 401
            audit_note(request, details={"username": request.POST.get("username", "")[:150]})
        return response


class LogoutView(auth_views.LogoutView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        audit_note(request, action="console.logout", object_type="user")
        return super().post(request, *args, **kwargs)


@require_POST
def switch(request: HttpRequest) -> HttpResponse:
    """Choose the tenant (one of the user's) and optionally one of its projects."""
    if not request.user.is_authenticated:
        return login_first(request, action="console.switch", object_type="tenant")
    audit_note(request, action="console.switch", object_type="tenant")
    current = request.session.get(SESSION_TENANT_KEY)
    before = principal_for_user(request.user, tenant_ref=current)
    principal = principal_for_user(request.user, tenant_ref=request.POST.get("tenant") or current)
    if principal is None:
        return render(
            request,
            "console/error.html",
            {"status": 404, "title": "Not found", "message": "tenant not found"},
            status=404,
        )
    request.principal = principal  # type: ignore[attr-defined]
    project_ref = parse_uuid(request.POST.get("project"))
    project = (
        project_list(principal=principal).filter(id=project_ref).first() if project_ref else None
    )
    request.session[SESSION_TENANT_KEY] = principal.tenant.slug
    if project is not None:
        request.session[SESSION_PROJECT_KEY] = str(project.id)
    else:
        request.session.pop(SESSION_PROJECT_KEY, None)
    audit_note(
        request,
        object_id=principal.tenant.id,
        project=project,
        details={"tenant": principal.tenant.slug, "project": project.slug if project else None},
    )
    overview = reverse("console:overview")
    # Another tenant's pages would be 404s: start over from its overview.
    tenant_changed = before is None or before.tenant_id != principal.tenant_id
    return redirect(overview if tenant_changed else _safe_next(request, overview))


# --- Overview ------------------------------------------------------------------------------------


@require_GET
@console_page()
def overview(request: HttpRequest, console: Console) -> HttpResponse:
    principal = console.principal
    runs = _filtered(run_selectors.run_list(principal=principal), console)
    counts = dict.fromkeys(STATUSES, 0)
    for row in runs.order_by().values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    pending = _filtered(
        run_selectors.interrupt_list(principal=principal).filter(status="pending"), console
    )
    reviews = _filtered(
        effect_selectors.effect_list(principal=principal).filter(status="needs_review"), console
    )
    sessions = _filtered(session_selectors.session_list(principal=principal), console)
    return render(
        request,
        "console/overview.html",
        _base(
            console,
            status_counts=[(status, counts[status]) for status in STATUSES],
            total_runs=sum(counts.values()),
            pending=list(pending.select_related("run").order_by("id")[:5]),
            reviews=list(reviews.order_by("id")[:5]),
            recent_sessions=list(sessions.order_by("-id")[:10]),
            recent_runs=list(runs.order_by("-created_at", "-id")[:10]),
        ),
    )


# --- Approvals -----------------------------------------------------------------------------------


@dataclass
class BoundInput:
    spec: FieldSpec
    value: str
    checked: bool


@dataclass
class ApprovalItem:
    interrupt: Interrupt
    form: ResponseForm
    request_json: str
    schema_json: str
    inputs: list[BoundInput] = field(default_factory=list)
    json_value: str = ""
    reason: str = ""
    error: ActionError | None = None


def _default_text(spec: FieldSpec) -> str:
    if spec.default is None:
        return ""
    if spec.enum is not None:
        return display.compact(spec.default)
    if isinstance(spec.default, bool):
        return "true" if spec.default else "false"
    return str(spec.default)


def _approval_item(
    interrupt: Interrupt, submitted: Any = None, error: ActionError | None = None
) -> ApprovalItem:
    form = response_form(interrupt.schema)
    item = ApprovalItem(
        interrupt=interrupt,
        form=form,
        request_json=display.pretty(interrupt.request),
        schema_json=display.pretty(interrupt.schema) if interrupt.schema is not None else "",
        error=error,
    )
    data = submitted if submitted is not None else {}
    for spec in form.fields or ():
        if submitted is not None:
            value = data.get(spec.input_name, "")
            checked = spec.input_name in data
        else:
            value = _default_text(spec)
            checked = spec.default is True
        item.inputs.append(BoundInput(spec=spec, value=value, checked=checked))
    item.json_value = data.get(JSON_FIELD, "")
    item.reason = data.get("reason", "")
    return item


def approval_items(
    console: Console,
    queryset: QuerySet[Interrupt],
    *,
    submitted: Any = None,
    error: ActionError | None = None,
) -> list[ApprovalItem]:
    items = []
    for interrupt in queryset:
        mine = error is not None and error.object_id == str(interrupt.id)
        items.append(
            _approval_item(interrupt, submitted if mine else None, error if mine else None)
        )
    return items


def _approvals_page(
    request: HttpRequest,
    console: Console,
    *,
    error: ActionError | None = None,
    status: int = 200,
) -> HttpResponse:
    pending = _filtered(
        run_selectors.interrupt_list(principal=console.principal).filter(status="pending"),
        console,
    ).select_related("run", "project")
    items = approval_items(
        console,
        pending.order_by("id")[:QUEUE_SIZE],
        submitted=request.POST if error else None,
        error=error,
    )
    return render(
        request,
        "console/approvals.html",
        _base(console, items=items, error=error, total=pending.count()),
        status=status,
    )


@require_GET
@console_page()
def approvals(request: HttpRequest, console: Console) -> HttpResponse:
    return _approvals_page(request, console)


@require_POST
@console_page(grant="interrupts:resolve", action="interrupt.resolve", object_type="interrupt")
def approval_resolve(
    request: HttpRequest, console: Console, interrupt_id: uuid.UUID
) -> HttpResponse:
    interrupt = run_selectors.interrupt_get(principal=console.principal, interrupt_id=interrupt_id)
    audit_note(request, object_id=interrupt.id, project=interrupt.project)
    decision = request.POST.get("decision", "")
    digest = request.POST.get("request_digest", "")
    try:
        if not digest:
            raise ValidationFailed(
                "request_digest is required: the decision is bound to the request you saw",
                details={"request_digest": ["required"]},
            )
        response = None
        if decision in ("approve", "respond"):
            response = parse_response(response_form(interrupt.schema), request.POST)
        resolved = interrupt_resolve(
            interrupt=interrupt,
            decision=decision,
            response=response,
            reason=request.POST.get("reason", "")[:500],
            request_digest=digest,
            actor=console.principal.actor,
        )
    except DomainError as exc:
        _refused(request, exc, decision=decision, request_digest=digest, via="console")
        error = ActionError.of(exc, interrupt.id)
        if request.POST.get("origin") == "run":
            return _run_page(request, console, interrupt.run, error=error)
        return _approvals_page(request, console, error=error, status=exc.status_code)
    audit_note(
        request,
        details={
            "decision": decision,
            "request_digest": resolved.request_digest,
            "run": str(resolved.run_id),
            "via": "console",
        },
    )
    messages.success(
        request,
        f"{decision.capitalize()}: “{resolved.title}” (run {str(resolved.run_id)[:8]} is queued "
        "again).",
    )
    return redirect(_safe_next(request, reverse("console:approvals")))


# --- Effects review ------------------------------------------------------------------------------


@dataclass
class EffectItem:
    effect: EffectRecord
    request_json: str
    error_json: str
    result_value: str = ""
    reason: str = ""
    error: ActionError | None = None


def _effects_page(
    request: HttpRequest, console: Console, *, error: ActionError | None = None, status: int = 200
) -> HttpResponse:
    reviews = _filtered(
        effect_selectors.effect_list(principal=console.principal).filter(status="needs_review"),
        console,
    ).select_related("run", "project")
    items = []
    for effect in reviews.order_by("id")[:QUEUE_SIZE]:
        mine = error is not None and error.object_id == str(effect.id)
        items.append(
            EffectItem(
                effect=effect,
                request_json=display.pretty(effect.request),
                error_json=display.pretty(effect.error) if effect.error is not None else "",
                result_value=request.POST.get("result", "") if mine else "",
                reason=request.POST.get("reason", "") if mine else "",
                error=error if mine else None,
            )
        )
    return render(
        request,
        "console/effects.html",
        _base(console, items=items, error=error, total=reviews.count()),
        status=status,
    )


@require_GET
@console_page()
def effects(request: HttpRequest, console: Console) -> HttpResponse:
    return _effects_page(request, console)


@require_POST
@console_page(grant="effects:resolve", action="effect.resolve", object_type="effect")
def effect_resolve_view(
    request: HttpRequest, console: Console, effect_id: uuid.UUID
) -> HttpResponse:
    effect = effect_selectors.effect_get(principal=console.principal, effect_id=effect_id)
    audit_note(request, object_id=effect.id, project=effect.project)
    outcome = request.POST.get("outcome", "")
    digest = request.POST.get("request_digest", "")
    try:
        if outcome not in RESOLUTIONS:
            raise ValidationFailed(
                f"outcome must be one of {', '.join(RESOLUTIONS)}",
                details={"outcome": ["unknown outcome"]},
            )
        if not digest:
            raise ValidationFailed(
                "request_digest is required: the decision is bound to the request you saw",
                details={"request_digest": ["required"]},
            )
        raw = request.POST.get("result", "").strip()
        result = parse_json(raw, field="result") if outcome == "applied" and raw else None
        resolved = effect_resolve(
            effect=effect,
            outcome=outcome,
            request_digest=digest,
            result=result,
            reason=request.POST.get("reason", "")[:500],
            actor=console.principal.actor,
        )
    except DomainError as exc:
        _refused(request, exc, outcome=outcome, request_digest=digest, via="console")
        return _effects_page(
            request, console, error=ActionError.of(exc, effect.id), status=exc.status_code
        )
    audit_note(
        request,
        details={
            "outcome": outcome,
            "request_digest": resolved.request_digest,
            "run": str(resolved.run_id),
            "via": "console",
        },
    )
    messages.success(
        request,
        f"Effect {resolved.key!r}: {outcome.replace('_', ' ')} (run {str(resolved.run_id)[:8]}).",
    )
    return redirect(_safe_next(request, reverse("console:effects")))


# --- Runs ----------------------------------------------------------------------------------------


@require_GET
@console_page()
def runs(request: HttpRequest, console: Console) -> HttpResponse:
    principal = console.principal
    qs = run_selectors.run_list(principal=principal).select_related("project")
    status = request.GET.get("status", "")
    workflow = request.GET.get("workflow", "").strip()
    project = console.project
    if "project" in request.GET:
        wanted = parse_uuid(request.GET.get("project"))
        project = next((p for p in console.projects if p.id == wanted), None)
    if status in STATUSES:
        qs = qs.filter(status=status)
    if workflow:
        qs = qs.filter(workflow=workflow)
    if project is not None:
        qs = qs.filter(project=project)
    rows, next_before = _keyset(qs, request)
    query = request.GET.copy()
    query.pop("before", None)
    if next_before:
        query["before"] = next_before
    return render(
        request,
        "console/runs.html",
        _base(
            console,
            runs=rows,
            statuses=STATUSES,
            status=status,
            workflow=workflow,
            filter_project=project,
            workflows=sorted(e.name for e in registration.workflows().all()),
            next_query=query.urlencode() if next_before else "",
            first_page="before" in request.GET,
        ),
    )


def _run_page(
    request: HttpRequest,
    console: Console,
    run: Run,
    *,
    error: ActionError | None = None,
) -> HttpResponse:
    principal = console.principal
    after = parse_int(request.GET.get("events_after"))
    if after is None:
        after = max(0, run.event_seq - EVENTS_SHOWN)
    events = run_selectors.event_page(run, after=after, limit=EVENTS_SHOWN)
    tail = not events or events[-1].seq >= run.event_seq
    try:
        state_json = display.pretty(run_state_at(run))
    except Conflict as exc:
        state_json = f"(the state cannot be rebuilt: {exc.message})"
    checkpoints = run_selectors.checkpoint_page(
        run, after=max(0, run.checkpoint_seq - CHECKPOINTS_SHOWN), limit=CHECKPOINTS_SHOWN
    )
    visited = run_selectors.checkpoint_steps(run)
    current = [] if run.status in TERMINAL else [str(n) for n in run.next_nodes or []]
    plan = layout(run.plan.graph)
    pending = run_selectors.interrupt_list(principal=principal).filter(run=run, status="pending")
    reviews = effect_selectors.effect_list(principal=principal).filter(
        run=run, status="needs_review"
    )
    children = (
        run_selectors.run_list(principal=principal).filter(parent=run).order_by("created_at", "id")
    )
    status = error.status if error is not None else 200
    return render(
        request,
        "console/run.html",
        _base(
            console,
            run=run,
            error=error,
            events=[
                {
                    "seq": e.seq,
                    "type": e.type,
                    "step": e.step,
                    "data": display.compact(e.data) if e.data else "",
                    "created_at": e.created_at,
                }
                for e in events
            ],
            events_after=after,
            earlier_after=max(0, after - EVENTS_SHOWN) if after > 0 else None,
            later_after=events[-1].seq if events and not tail else None,
            live=tail,
            state_json=state_json,
            input_json=display.pretty(run.input),
            output_json=display.pretty(run.output) if run.output is not None else "",
            error_json=display.pretty(run.error) if run.error is not None else "",
            checkpoints=[
                {
                    "seq": c["checkpoint"].seq,
                    "step": c["checkpoint"].step,
                    "next_nodes": c["checkpoint"].next_nodes,
                    "session_id": c["checkpoint"].session_id,
                    "session_len": c["checkpoint"].session_len,
                    "attempt": c["checkpoint"].attempt,
                    "full": c["checkpoint"].full,
                    "created_at": c["checkpoint"].created_at,
                    "state_json": display.pretty(c["state"]),
                }
                for c in reversed(checkpoints)
            ],
            plan=plan,
            current_nodes=current,
            visited_nodes=sorted(visited),
            approvals=approval_items(
                console,
                pending.order_by("id"),
                submitted=request.POST if error else None,
                error=error,
            ),
            reviews=list(reviews.order_by("id")),
            children=list(children[:100]),
            terminal=run.status in TERMINAL,
            live_config={
                "kind": "run",
                "id": str(run.id),
                "after": events[-1].seq if events else run.event_seq,
                "status": run.status,
                "next_nodes": current,
                "terminal": sorted(TERMINAL),
                "ws_path": f"/ws/runs/{run.id}/",
                "api_path": f"/api/v1/runs/{run.id}/",
            },
        ),
        status=status,
    )


def _page_run(console: Console, run_id: object) -> Run:
    """The run in scope (or 404) with what its page shows: plan, project, session."""
    return run_selectors.run_get(
        principal=console.principal, run_id=run_id, related=("plan", "project", "session")
    )


def parse_int(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


@require_GET
@console_page()
def run_detail(request: HttpRequest, console: Console, run_id: uuid.UUID) -> HttpResponse:
    return _run_page(request, console, _page_run(console, run_id))


@require_POST
@console_page(grant="runs:cancel", action="run.cancel", object_type="run")
def run_cancel_view(request: HttpRequest, console: Console, run_id: uuid.UUID) -> HttpResponse:
    run = run_selectors.run_get(principal=console.principal, run_id=run_id)
    audit_note(request, object_id=run.id, project=run.project)
    reason = request.POST.get("reason", "").strip()[:500]
    try:
        run_cancel(run=run, reason=reason, actor=console.principal.actor)
    except DomainError as exc:
        _refused(request, exc, reason=reason, via="console")
        fresh = _page_run(console, run.id)
        return _run_page(request, console, fresh, error=ActionError.of(exc, run.id))
    audit_note(request, details={"reason": reason, "via": "console"})
    messages.success(request, "The run is cancelled (and its branches).")
    return redirect("console:run", run_id=run.id)


@require_POST
@console_page(grant="runs:write", action="run.resume", object_type="run")
def run_resume_view(request: HttpRequest, console: Console, run_id: uuid.UUID) -> HttpResponse:
    run = run_selectors.run_get(principal=console.principal, run_id=run_id)
    audit_note(request, object_id=run.id, project=run.project)
    reason = request.POST.get("reason", "").strip()[:500]
    try:
        run_resume(run=run, reason=reason, actor=console.principal.actor)
    except DomainError as exc:
        _refused(request, exc, reason=reason, via="console")
        fresh = _page_run(console, run.id)
        return _run_page(request, console, fresh, error=ActionError.of(exc, run.id))
    audit_note(request, details={"reason": reason, "via": "console"})
    messages.success(request, "The run is queued again.")
    return redirect("console:run", run_id=run.id)


# --- Sessions ------------------------------------------------------------------------------------


@require_GET
@console_page()
def sessions(request: HttpRequest, console: Console) -> HttpResponse:
    qs = _filtered(session_selectors.session_list(principal=console.principal), console)
    rows, next_before = _keyset(qs.select_related("project"), request)
    return render(
        request,
        "console/sessions.html",
        _base(console, sessions=rows, next_before=next_before, first_page="before" in request.GET),
    )


@require_GET
@console_page()
def session_detail(request: HttpRequest, console: Console, session_id: uuid.UUID) -> HttpResponse:
    session = session_selectors.session_get(principal=console.principal, session_id=session_id)
    length = session.length
    after = parse_int(request.GET.get("after"))
    if after is None or after < -1:
        after = max(-1, length - 1 - CHUNKS_SHOWN)
    page = session_selectors.chunk_page(session.id, after=after, limit=CHUNKS_SHOWN, upto=length)
    chunks = [display.chunk_view(dict(c)) for c in ChunkOut(page, many=True).data]
    last_seq = page[-1].seq if page else after
    tail = last_seq >= length - 1
    parents = list(
        LineageEdge.objects.for_principal(console.principal)
        .filter(child=session)
        .select_related("parent")
        .order_by("position", "id")
    )
    children = list(
        LineageEdge.objects.for_principal(console.principal)
        .filter(parent=session)
        .select_related("child")
        .order_by("id")[:50]
    )
    runs = list(
        run_selectors.run_list(principal=console.principal)
        .filter(session=session)
        .order_by("-created_at", "-id")[:20]
    )
    return render(
        request,
        "console/session.html",
        _base(
            console,
            session=session,
            chunks=chunks,
            length=length,
            parents=parents,
            children=children,
            runs=runs,
            earlier_after=max(-1, after - CHUNKS_SHOWN) if after > -1 else None,
            later_after=last_seq if not tail else None,
            live=tail,
            metadata_json=display.pretty(session.metadata) if session.metadata else "",
            live_config={
                "kind": "session",
                "id": str(session.id),
                "after": last_seq,
                "ws_path": f"/ws/sessions/{session.id}/",
                "api_path": f"/api/v1/sessions/{session.id}/",
            },
        ),
    )


def lineage_data(session: Session, *, limit: int | None = None) -> dict[str, Any]:
    """The first page of the session's lineage graph, in the lineage API's shape; ``next`` is
    the API address of the following page."""
    limit = limit or LINEAGE_PAGE
    page = session_selectors.lineage_page(session, direction="graph", limit=limit)
    next_url = None
    if page.next_after:
        next_url = (
            f"/api/v1/sessions/{session.id}/lineage/?direction=graph&limit={limit}"
            f"&after={page.next_after}"
        )
    return {
        "session": str(session.id),
        "nodes": SessionOut(page.nodes, many=True).data,
        "edges": LineageEdgeOut(page.edges, many=True).data,
        "next": next_url,
    }


def vendor_assets_installed() -> bool:
    """The lineage graph's libraries are there: installed (finders) or collected (production)."""
    return all(finders.find(path) or staticfiles_storage.exists(path) for path in VENDOR_FILES)


@require_GET
@console_page()
def session_lineage(request: HttpRequest, console: Console, session_id: uuid.UUID) -> HttpResponse:
    session = session_selectors.session_get(principal=console.principal, session_id=session_id)
    return render(
        request,
        "console/lineage.html",
        _base(
            console,
            session=session,
            lineage=lineage_data(session),
            assets_installed=vendor_assets_installed(),
            session_url_template=reverse("console:session", args=[uuid.UUID(int=0)]),
            page_size=LINEAGE_PAGE,
        ),
    )
