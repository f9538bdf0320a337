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
from django.core.paginator import Paginator
from django.db.models import Count, F, FloatField, IntegerField, Q, QuerySet, Sum, Window
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, RowNumber
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from effects_app import selectors as effect_selectors
from effects_app.models import EFFECT_CLASSES, EFFECT_STATES, RESOLUTIONS, EffectRecord
from effects_app.services import ancestor_review_details, effect_resolve
from openrath_project.api.audit import audit_note
from openrath_project.api.permissions import SESSION_TENANT_KEY
from openrath_project.console import display, timeline
from openrath_project.console.access import (
    SESSION_PROJECT_KEY,
    Console,
    console_page,
    login_first,
)
from openrath_project.console.plan_layout import PlacedNode, layout
from openrath_project.console.schema_form import (
    JSON_FIELD,
    FieldSpec,
    ResponseForm,
    parse_json,
    parse_response,
    response_form,
)
from openrath_project.errors import Conflict, DomainError, NotFound, ValidationFailed
from openrath_project.tenancy.grants import ROLE_GRANTS
from openrath_project.tenancy.models import Membership
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid, project_list
from openrath_project.tenancy.services import principal_for_user
from runs_app import registration
from runs_app import selectors as run_selectors
from runs_app.interrupts import interrupt_resolve
from runs_app.models import (
    INPUT_POLICIES,
    RUN_KINDS,
    Checkpoint,
    Interrupt,
    Run,
    RunEvent,
    RunFork,
)
from runs_app.replay import REPLAYABLE_STATUSES, replay_run
from runs_app.services import run_cancel, run_resume, run_state_at
from runs_app.services.compare import RunComparison, run_compare
from runs_app.services.forks import run_fork
from runs_app.tracing import trace_view
from runs_app.transitions import STATUSES, TERMINAL
from sessions_app import selectors as session_selectors
from sessions_app.api.serializers import (
    ChunkOut,
    LineageEdgeOut,
    LineageNodeOut,
)
from sessions_app.models import Chunk, LineageEdge, Session

PAGE_SIZE = 50
QUEUE_SIZE = 100
EVENTS_SHOWN = 200
CHUNKS_SHOWN = 200
CHECKPOINTS_SHOWN = 20
STEP_EVENTS_SHOWN = 20
STEP_CHUNKS_SHOWN = 5
#: Events the run page's waterfall reads (the run's and its branch runs', the oldest first).
WATERFALL_EVENTS = 3000
LINEAGE_PAGE = 200
#: The header live.js sends when it re-reads a page for its parts (not shown to a person).
FRAGMENT_HEADER = "X-OpenRath-Fragment"
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


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico`` (asked for by browsers on every page, the admin's too): the console's
    icon in static files."""
    return redirect(staticfiles_storage.url("console/favicon.svg"))


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
            # Top-level runs: a fan-out's branches are counted on their parent's row.
            recent_runs=list(
                runs.filter(parent__isnull=True)
                .annotate(branch_count=Count("children"))
                .order_by("-created_at", "-id")[:10]
            ),
        ),
    )


# --- Approvals -----------------------------------------------------------------------------------


@dataclass
class BoundInput:
    spec: FieldSpec
    value: str
    checked: bool


@dataclass
class DeclaredEffect:
    """An effect an approval lets happen, as far as it is known before the step goes on."""

    key: str
    source: str  # "request" (the workflow named it in the question), "plan", "recorded"
    step: str = ""
    effect_class: str = ""
    payload_json: str = ""
    status: str = ""
    effect_id: uuid.UUID | None = None


@dataclass
class ApprovalContext:
    """What a person needs next to a question to decide it: what started the run, the
    evidence (its sessions), what happens once it is approved, who else may decide, and
    when and how it expires."""

    input_json: str = ""
    first_message: str = ""
    first_message_agent: str = ""
    sessions: list[tuple[str, Any]] = field(default_factory=list)  # (label, session id)
    parent_run: Run | None = None
    effects: list[DeclaredEffect] = field(default_factory=list)
    deciders: list[str] = field(default_factory=list)
    expiry: str = ""


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
    context: ApprovalContext | None = None


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


#: The roles whose grants include deciding interrupts (who else may decide one).
DECIDING_ROLES = tuple(
    role for role, grants in ROLE_GRANTS.items() if "interrupts:resolve" in grants
)
DECIDERS_SHOWN = 12


def _first_message(principal: Principal, session_id: Any) -> tuple[str, str]:
    """The first user message of the session as the run sees it (an inherited chunk of a
    fork included), else its first chunk: ``(text, agent)``."""
    session = session_selectors.session_list(principal=principal).filter(id=session_id).first()
    if session is None:
        return "", ""
    page = session_selectors.chunk_page(session.id, after=-1, limit=20, upto=session.length)
    rows = [display.chunk_view(dict(c)) for c in ChunkOut(page, many=True).data]
    chosen = next((c for c in rows if c["role"] == "user"), rows[0] if rows else None)
    if chosen is None:
        return "", ""
    body = chosen["body"]
    text = body.get("text") or body.get("json") or body.get("output") or ""
    return str(text)[:2000], str(chosen.get("agent") or chosen["role"])


def _expiry_text(interrupt: Interrupt) -> str:
    if interrupt.expires_at is None:
        return "Never expires: the run waits until someone decides."
    when = timezone.localtime(interrupt.expires_at).strftime("%Y-%m-%d %H:%M:%S %Z")
    default = interrupt.default
    if default is None:
        return f"Expires {when}; then the run ends timed_out (no default is declared)."
    decision = default.get("decision", "reject")
    response = (
        f" with response {display.compact(default['response'])}" if "response" in default else ""
    )
    return f"Expires {when}; then the declared default applies: {decision}{response}."


def approval_context(console: Console, interrupt: Interrupt, run: Run) -> ApprovalContext:
    """The context of one pending interrupt (a handful of queries; the queue shares them per
    run through the caller's cache)."""
    principal = console.principal
    context = ApprovalContext(input_json=display.pretty(run.input) if run.input else "")
    if run.session_id:
        context.first_message, context.first_message_agent = _first_message(
            principal, run.session_id
        )
        context.sessions.append(("this run's session", run.session_id))
    if run.parent_id:
        context.parent_run = (
            run_selectors.run_list(principal=principal).filter(id=run.parent_id).first()
        )
        if context.parent_run is not None and context.parent_run.session_id:
            context.sessions.append(("the parent run's session", context.parent_run.session_id))
    for branch, session_id in (
        run_selectors.run_list(principal=principal)
        .filter(parent=run)
        .order_by("created_at", "id")
        .values_list("branch", "session_id")[:20]
    ):
        if session_id:
            context.sessions.append((f"branch {branch}", session_id))
    named = interrupt.request.get("effects") if isinstance(interrupt.request, dict) else None
    for entry in named if isinstance(named, list) else []:
        if isinstance(entry, dict):
            context.effects.append(
                DeclaredEffect(
                    key=str(entry.get("key") or entry.get("name") or "effect"),
                    source="request",
                    payload_json=display.pretty(entry.get("request", entry.get("payload"))),
                )
            )
    nodes = {n["id"]: n for n in (run.plan.graph or {}).get("nodes", [])}
    here = nodes.get(interrupt.step, {})
    for step in [interrupt.step, *here.get("successors", [])]:
        effects = nodes.get(step, {}).get("effects", "none")
        if effects and effects != "none":
            context.effects.append(
                DeclaredEffect(key=step, source="plan", step=step, effect_class=str(effects))
            )
    for effect in (
        effect_selectors.effect_list(principal=principal)
        .filter(run=run)
        .order_by("created_at")[:20]
    ):
        context.effects.append(
            DeclaredEffect(
                key=effect.key,
                source="recorded",
                step=effect.step,
                effect_class=effect.effect_class,
                payload_json=display.pretty(effect.request),
                status=effect.status,
                effect_id=effect.id,
            )
        )
    context.deciders = list(
        Membership.objects.for_principal(principal)
        .filter(role__in=DECIDING_ROLES)
        .order_by("user__username")
        .values_list("user__username", flat=True)[:DECIDERS_SHOWN]
    )
    context.expiry = _expiry_text(interrupt)
    return context


def approval_items(
    console: Console,
    queryset: QuerySet[Interrupt],
    *,
    submitted: Any = None,
    error: ActionError | None = None,
) -> list[ApprovalItem]:
    items = []
    contexts: dict[uuid.UUID, ApprovalContext] = {}
    for interrupt in queryset:
        mine = error is not None and error.object_id == str(interrupt.id)
        item = _approval_item(interrupt, submitted if mine else None, error if mine else None)
        if interrupt.run_id not in contexts:
            contexts[interrupt.run_id] = approval_context(console, interrupt, interrupt.run)
        item.context = contexts[interrupt.run_id]
        items.append(item)
    return items


@dataclass
class ApprovalGroup:
    """Pending interrupts asking the same thing (same workflow, step, kind and request digest,
    so the same payload): one decision may approve them all, each bound to its own digest."""

    items: list[ApprovalItem]

    @property
    def first(self) -> ApprovalItem:
        return self.items[0]


def approval_groups(items: list[ApprovalItem]) -> list[ApprovalGroup]:
    groups: dict[tuple[str, str, str, str], list[ApprovalItem]] = {}
    for item in items:
        i = item.interrupt
        key = (i.run.workflow, i.step, i.kind, i.request_digest + display.compact(i.schema))
        groups.setdefault(key, []).append(item)
    return [ApprovalGroup(found) for found in groups.values() if len(found) > 1]


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
    ).select_related("run", "run__plan", "project")
    items = approval_items(
        console,
        pending.order_by("id")[:QUEUE_SIZE],
        submitted=request.POST if error else None,
        error=error,
    )
    return render(
        request,
        "console/approvals.html",
        _base(
            console,
            items=items,
            groups=approval_groups(items),
            error=error,
            total=pending.count(),
        ),
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
        f"{decision.capitalize()}: “{resolved.title}” (run {display.short_id(resolved.run_id)} is "
        "queued again).",
    )
    return redirect(_safe_next(request, reverse("console:approvals")))


@require_POST
@console_page(grant="interrupts:resolve", action="interrupt.resolve_many", object_type="interrupt")
def approval_resolve_many(request: HttpRequest, console: Console) -> HttpResponse:
    """Approve several identical requests at once. Each interrupt is named with the digest the
    person was shown for it and resolved on its own (``interrupt_resolve``, bound to that
    digest): one that changed or was decided meanwhile is refused and named, the rest go on."""
    ids = request.POST.getlist("interrupt")[:QUEUE_SIZE]
    outcomes: list[dict[str, str]] = []
    refused: list[tuple[str, DomainError]] = []
    approved = 0
    for raw_id in ids:
        digest = request.POST.get(f"digest-{raw_id}", "")
        try:
            interrupt = run_selectors.interrupt_get(
                principal=console.principal, interrupt_id=raw_id
            )
            if not digest:
                raise ValidationFailed(
                    "request_digest is required: the decision is bound to the request you saw",
                    details={"request_digest": ["required"]},
                )
            response = parse_response(response_form(interrupt.schema), request.POST)
            interrupt_resolve(
                interrupt=interrupt,
                decision="approve",
                response=response,
                reason=request.POST.get("reason", "")[:500],
                request_digest=digest,
                actor=console.principal.actor,
            )
        except DomainError as exc:
            outcomes.append({"interrupt": raw_id, "request_digest": digest, "error": exc.code})
            refused.append((raw_id, exc))
            continue
        approved += 1
        outcomes.append({"interrupt": raw_id, "request_digest": digest, "outcome": "approved"})
    audit_note(request, details={"decision": "approve", "interrupts": outcomes, "via": "console"})
    if not approved and refused:
        # Nothing was decided: answered as one refused decision is (a 404 for interrupts that
        # are not the caller's to see, else the first refusal on the approvals page).
        first_id, first = refused[0]
        if all(isinstance(refusal, NotFound) for _id, refusal in refused):
            raise first
        _refused(request, first, decision="approve", interrupts=outcomes, via="console")
        return _approvals_page(
            request, console, error=ActionError.of(first, first_id), status=first.status_code
        )
    for raw_id, refusal in refused:
        messages.error(request, f"Not approved: {display.short_id(raw_id)}: {refusal.message}")
    if approved:
        messages.success(request, f"Approved {approved} of {len(ids)} identical requests.")
    return redirect(reverse("console:approvals"))


# --- Effects review ------------------------------------------------------------------------------


@dataclass
class EffectItem:
    effect: EffectRecord
    request_json: str
    error_json: str
    result_json: str = ""
    resolution_json: str = ""
    result_value: str = ""
    reason: str = ""
    error: ActionError | None = None
    #: An ``effect_in_ancestor`` review: both requests, their digests and the diff.
    ancestor: dict[str, Any] | None = None


def ancestor_view(effect: EffectRecord) -> dict[str, Any] | None:
    """What the effects page shows of the ancestor's record an effect matched (a forked run
    reached an effect its ancestor committed after the branch point)."""
    if effect.ancestor_id is None:
        return None
    details = ancestor_review_details(effect)
    ancestor = details["ancestor"]
    return {
        **ancestor,
        "request_json": display.pretty(ancestor["request"]),
        "result_json": _json_or_empty(ancestor["result"]),
        "diff_rows": display.diff_rows(details["diff"]),
    }


@dataclass(frozen=True)
class EffectFilters:
    """The effects page's filters, from its query string (an unknown value is ignored)."""

    status: str = ""
    step: str = ""
    run: uuid.UUID | None = None
    effect_class: str = ""

    @classmethod
    def of(cls, request: HttpRequest) -> EffectFilters:
        status = request.GET.get("status", "")
        effect_class = request.GET.get("class", "")
        return cls(
            status=status if status in EFFECT_STATES else "",
            step=request.GET.get("step", "").strip()[:200],
            run=parse_uuid(request.GET.get("run")),
            effect_class=effect_class if effect_class in EFFECT_FILTER_CLASSES else "",
        )

    @property
    def active(self) -> bool:
        return bool(self.status or self.step or self.run or self.effect_class)


#: Selector decisions are not effects an operator reviews (``effect_list`` leaves them out).
EFFECT_FILTER_CLASSES = tuple(c for c in EFFECT_CLASSES if c != "decision")


def _json_or_empty(value: Any) -> str:
    return display.pretty(value) if value is not None else ""


def _effects_page(
    request: HttpRequest, console: Console, *, error: ActionError | None = None, status: int = 200
) -> HttpResponse:
    filters = EffectFilters.of(request)
    listed = _filtered(
        effect_selectors.effect_search(
            principal=console.principal,
            status=filters.status,
            step=filters.step,
            run=filters.run,
            effect_class=filters.effect_class,
        ),
        console,
    ).select_related("run", "project", "ancestor")
    page = Paginator(listed, PAGE_SIZE).get_page(request.GET.get("page"))
    items = []
    for effect in page.object_list:
        mine = error is not None and error.object_id == str(effect.id)
        items.append(
            EffectItem(
                effect=effect,
                request_json=display.pretty(effect.request),
                error_json=_json_or_empty(effect.error),
                result_json=_json_or_empty(effect.result),
                resolution_json=_json_or_empty(effect.resolution_result),
                result_value=request.POST.get("result", "") if mine else "",
                reason=request.POST.get("reason", "") if mine else "",
                error=error if mine else None,
                ancestor=ancestor_view(effect),
            )
        )
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "console/effects.html",
        _base(
            console,
            items=items,
            error=error,
            page=page,
            filters=filters,
            statuses=EFFECT_STATES,
            effect_classes=EFFECT_FILTER_CLASSES,
            page_query=query.urlencode(),
            # Where a resolution returns: this very list (a refused POST re-renders it at the
            # resolve address, which only takes POSTs: back to the whole list then).
            return_to=(
                request.get_full_path() if request.method == "GET" else reverse("console:effects")
            ),
            total=page.paginator.count,
        ),
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
            # An effect_in_ancestor review is bound to the ancestor's request too.
            ancestor_digest=request.POST.get("ancestor_digest") or None,
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
            **(
                {"ancestor_digest": request.POST.get("ancestor_digest", "")}
                if resolved.ancestor_id is not None
                else {}
            ),
            "run": str(resolved.run_id),
            "via": "console",
        },
    )
    messages.success(
        request,
        f"Effect {resolved.key!r}: {outcome.replace('_', ' ')} "
        f"(run {display.short_id(resolved.run_id)}).",
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
    # Replays (regression checks) are listed apart, as the API does (?kind=replay).
    kind = request.GET.get("kind", "run")
    kind = kind if kind in RUN_KINDS else "run"
    qs = qs.filter(kind=kind)
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
            kind=kind,
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
    current = [] if run.status in TERMINAL else [str(n) for n in run.next_nodes or []]
    pending = run_selectors.interrupt_list(principal=principal).filter(run=run, status="pending")
    reviews = effect_selectors.effect_list(principal=principal).filter(
        run=run, status="needs_review"
    )
    children = (
        run_selectors.run_list(principal=principal).filter(parent=run).order_by("created_at", "id")
    )
    status = error.status if error is not None else 200
    lineage = run_lineage(run, principal)
    # The run row was read before its events and checkpoints: count what is shown at least.
    events_total = max(run.event_seq, events[-1].seq if events else 0)
    checkpoints_total = max(
        run.checkpoint_seq, max((c["checkpoint"].seq for c in checkpoints), default=0)
    )
    return render(
        request,
        "console/run.html",
        _base(
            console,
            run=run,
            error=error,
            # live.js re-reads the page for its server-rendered parts: leave flash messages be.
            fragment=request.headers.get(FRAGMENT_HEADER) == "1",
            events_total=events_total,
            checkpoints_total=checkpoints_total,
            events=[event_view(e) for e in events],
            waterfall=run_waterfall(run, principal),
            trace=trace_view(run),
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
            current_nodes=current,
            **plan_data(run, principal),
            approvals=approval_items(
                console,
                pending.order_by("id"),
                submitted=request.POST if error else None,
                error=error,
            ),
            reviews=list(reviews.order_by("id")),
            children=list(children[:100]),
            **lineage,
            forkable=run.kind == "run" and bool(run.workflow),
            replayable=(
                run.kind == "run" and bool(run.workflow) and run.status in REPLAYABLE_STATUSES
            ),
            fork_submitted=request.POST if error is not None else None,
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


def event_view(event: RunEvent) -> dict[str, Any]:
    """An event as the timeline lists it: in words (by type), with its raw data at hand."""
    return {
        "seq": event.seq,
        "type": event.type,
        "step": event.step,
        "text": timeline.describe(event.type, event.data),
        "group": timeline.event_group(event.type),
        "raw": display.pretty(event.data) if event.data else "",
        "data": display.compact(event.data) if event.data else "",
        "created_at": event.created_at,
    }


def run_waterfall(run: Run, principal: Principal) -> timeline.Waterfall:
    """The run's waterfall: one lane for the run, one per branch run (read in scope), from
    their first ``WATERFALL_EVENTS`` events (one query for the branches, one for the events)."""
    branches = list(
        run_selectors.run_list(principal=principal)
        .filter(parent=run)
        .order_by("created_at", "id")
        .values_list("id", "branch", "status")
    )
    names = {run.id: "run"} | {
        branch_id: f"branch {branch or display.short_id(branch_id)}"
        for branch_id, branch, _ in branches
    }
    running = {run.id: run.status == "running"} | {
        branch_id: status == "running" for branch_id, _, status in branches
    }
    rows = (
        RunEvent.objects.filter(run_id__in=list(names))
        .order_by("created_at", "id")
        .values_list("run_id", "seq", "type", "step", "data", "created_at")[:WATERFALL_EVENTS]
    )
    by_run: dict[uuid.UUID, list[timeline.TimelineEvent]] = {key: [] for key in names}
    for run_id, seq, kind, step, data, at in rows:
        by_run[run_id].append(timeline.TimelineEvent(names[run_id], seq, kind, step, data, at))
    lanes = [(names[key], sorted(by_run[key], key=lambda e: e.seq), running[key]) for key in names]
    return timeline.waterfall(lanes, now=timezone.now())


@dataclass
class StepEvents:
    """What the run page shows when a plan node is clicked: the step's state, its latest
    events in the run and in its branch runs (a fan-out's branch steps run in child runs),
    its latest checkpoint with what that checkpoint changed, and the chunks it wrote."""

    node: PlacedNode
    events: list[dict[str, Any]]
    more: bool
    state: str = "not-reached"
    checkpoint: dict[str, Any] | None = None
    chunks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def state_label(self) -> str:
        return NODE_STATE_LABELS[self.state]

    @property
    def mark(self) -> str:
        return NODE_STATE_MARKS[self.state]


#: The plan graph's node states, what each is called and the mark drawn with it (the colour is
#: never the only signal).
NODE_STATE_LABELS = {
    "done": "done (checkpointed)",
    "running": "running now",
    "waiting": "waiting for a person",
    "retrying": "waiting to retry",
    "failed": "failed",
    "next": "next",
    "not-reached": "not reached",
}
NODE_STATE_MARKS = {
    "done": "✓",
    "running": "▶",
    "waiting": "‖",
    "retrying": "↻",
    "failed": "✕",
    "next": "›",
    "not-reached": "",
}


def node_state(
    step: str,
    *,
    latest_event: str,
    checkpointed: bool,
    waiting: bool,
    running: bool,
    upcoming: bool,
    run_failed: bool,
) -> str:
    """One plan node's state from what the run and its branch runs did there."""
    if waiting:
        return "waiting"
    if running:
        return "running"
    if latest_event == "step.retry_scheduled":
        return "failed" if run_failed else "retrying"
    if latest_event in ("run.failed", "lease.expired") and run_failed:
        return "failed"
    if checkpointed:
        return "done"
    if upcoming:
        return "next"
    return "not-reached"


def _checkpointed_steps(run_ids: list[uuid.UUID]) -> set[str]:
    """The steps any of these runs (read in scope by the caller) checkpointed."""
    rows = Checkpoint.objects.filter(run_id__in=run_ids).order_by().values_list("step", flat=True)
    return set(rows.distinct())


def _latest_per_step(
    qs: QuerySet[Any], *, per_step: int, newest: list[Any]
) -> dict[str, list[Any]]:
    """The latest ``per_step`` rows of each step of ``qs``, newest first. One query (a window
    function ranks the rows of each step)."""
    rank = Window(RowNumber(), partition_by=[F("step")], order_by=newest)
    found: dict[str, list[Any]] = {}
    for row in qs.annotate(rank=rank).filter(rank__lte=per_step).order_by("step", "rank"):
        found.setdefault(row.step, []).append(row)
    return found


def _step_events(
    run_ids: list[uuid.UUID], *, steps: list[str], per_step: int
) -> dict[str, list[RunEvent]]:
    """The latest ``per_step`` events of each step over these runs (read in scope by the
    caller), newest first."""
    return _latest_per_step(
        RunEvent.objects.filter(run_id__in=run_ids, step__in=steps),
        per_step=per_step,
        newest=[F("created_at").desc(), F("id").desc()],
    )


def _step_checkpoint(checkpoint: Checkpoint, labels: dict[uuid.UUID, str]) -> dict[str, Any]:
    """A step's latest checkpoint and what it changed: a delta checkpoint stores exactly that;
    a full one (a keyframe) stores the whole state."""
    return {
        "seq": checkpoint.seq,
        "run_id": checkpoint.run_id,
        "run_label": labels.get(checkpoint.run_id, display.short_id(checkpoint.run_id)),
        "attempt": checkpoint.attempt,
        "full": checkpoint.full,
        "next_nodes": checkpoint.next_nodes,
        "created_at": checkpoint.created_at,
        "changed": display.pretty(checkpoint.state),
    }


def plan_data(run: Run, principal: Principal) -> dict[str, Any]:
    """The plan diagram of the run page: the layout, each node's state (from the run's own
    and its branch runs' checkpoints, events, pending interrupts and next nodes) and, per
    step, its events, latest checkpoint and chunks. Six queries, whatever the plan's size or
    the number of branches."""
    plan = layout(run.plan.graph)
    branches = list(
        run_selectors.run_list(principal=principal)
        .filter(parent=run)
        .values_list("id", "status", "next_nodes")
    )
    run_ids = [run.id, *(branch_id for branch_id, _, _ in branches)]
    visited = _checkpointed_steps(run_ids)
    statuses = [(run.status, run.next_nodes or []), *((st, nn or []) for _, st, nn in branches)]
    running_nodes = {str(n) for st, nodes in statuses if st == "running" for n in nodes}
    upcoming = {str(n) for st, nodes in statuses if st not in TERMINAL for n in nodes}
    in_branches = sorted(
        {str(n) for _, status, nodes in branches if status not in TERMINAL for n in nodes or []}
    )
    waiting_steps = set(
        run_selectors.interrupt_list(principal=principal)
        .filter(run_id__in=run_ids, status="pending")
        .values_list("step", flat=True)
    )
    steps = [n.id for n in plan.nodes]
    by_step = _step_events(run_ids, steps=steps, per_step=STEP_EVENTS_SHOWN + 1)
    checkpoints = _latest_per_step(
        Checkpoint.objects.filter(run_id__in=run_ids, step__in=steps),
        per_step=1,
        newest=[F("created_at").desc(), F("seq").desc()],
    )
    chunks = _latest_per_step(
        # A merge's copies of its branches' chunks (``branch`` set) are not written again.
        Chunk.objects.for_principal(principal).filter(
            run_id__in=run_ids, step__in=steps, branch=""
        ),
        per_step=STEP_CHUNKS_SHOWN,
        newest=[F("created_at").desc(), F("id").desc()],
    )
    labels = {run.id: "this run"} | {
        branch_id: f"branch run {display.short_id(branch_id)}" for branch_id, _, _ in branches
    }
    run_failed = run.status in ("failed", "timed_out", "cancelled")
    step_events = []
    states: dict[str, str] = {}
    for node in plan.nodes:
        rows = by_step.get(node.id, [])
        state = node_state(
            node.id,
            latest_event=rows[0].type if rows else "",
            checkpointed=node.id in visited,
            waiting=node.id in waiting_steps,
            running=node.id in running_nodes,
            upcoming=node.id in upcoming,
            run_failed=run_failed,
        )
        states[node.id] = state
        latest = checkpoints.get(node.id)
        step_events.append(
            StepEvents(
                node=node,
                events=[
                    {
                        "run_id": e.run_id,
                        "run_label": labels.get(e.run_id, display.short_id(e.run_id)),
                        "own": e.run_id == run.id,
                        "seq": e.seq,
                        "type": e.type,
                        "text": timeline.describe(e.type, e.data),
                        "group": timeline.event_group(e.type),
                        "raw": display.pretty(e.data) if e.data else "",
                        "created_at": e.created_at,
                    }
                    for e in rows[:STEP_EVENTS_SHOWN]
                ],
                more=len(rows) > STEP_EVENTS_SHOWN,
                state=state,
                checkpoint=_step_checkpoint(latest[0], labels) if latest else None,
                chunks=[
                    display.chunk_view(dict(c))
                    for c in ChunkOut(list(reversed(chunks.get(node.id, []))), many=True).data
                ],
            )
        )
    return {
        "plan": plan,
        "visited_nodes": sorted(visited),
        "branch_nodes": in_branches,
        "node_states": states,
        "node_legend": [(k, label, NODE_STATE_MARKS[k]) for k, label in NODE_STATE_LABELS.items()],
        "step_events": step_events,
    }


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


# --- Time travel: fork, replay, compare -----------------------------------------------------------

#: Forks and replays a run page lists.
LINEAGE_SHOWN = 50


def replay_report(run: Run) -> dict[str, Any] | None:
    """A replay run's report as its page shows it: identical, or the first differing step with
    its state, chunk and next-node differences as rows (path, old, new)."""
    if run.kind != "replay" or not isinstance(run.output, dict):
        return None
    report = dict(run.output)
    first = report.get("first_difference")
    if isinstance(first, dict):
        nodes = first.get("next_nodes") or {}
        report["difference"] = {
            **first,
            "state_rows": display.diff_rows(first.get("state_diff")),
            "chunk_rows": display.diff_rows(first.get("chunk_diff")),
            "nodes_differ": nodes.get("original") != nodes.get("replay"),
            "error_json": _json_or_empty(first.get("error")),
            "original_error_json": _json_or_empty(first.get("original_error")),
        }
    return report


def run_lineage(run: Run, principal: Principal) -> dict[str, Any]:
    """What a run page shows of its time-travel lineage: the fork edge it was made by, its
    forks, its replays (or, for a replay, the run it checks and its report)."""
    forked_from = (
        RunFork.objects.for_principal(principal).filter(child=run).select_related("parent").first()
    )
    forks = list(
        RunFork.objects.for_principal(principal)
        .filter(parent=run)
        .select_related("child")
        .order_by("-id")[:LINEAGE_SHOWN]
    )
    replays = list(
        run_selectors.run_list(principal=principal)
        .filter(replay_of=run)
        .order_by("-created_at", "-id")[:LINEAGE_SHOWN]
    )
    return {
        "forked_from": forked_from,
        "forked_patch_json": (
            display.pretty(forked_from.state_patch)
            if forked_from is not None and forked_from.state_patch is not None
            else ""
        ),
        "forks": forks,
        "replays": replays,
        "replay": replay_report(run),
    }


@require_POST
@console_page(grant="runs:write", action="run.fork", object_type="run")
def run_fork_view(request: HttpRequest, console: Console, run_id: uuid.UUID) -> HttpResponse:
    """The "fork from here" form of a checkpoint row: a new run from that checkpoint, with an
    optional JSON merge patch on its state, then the new run's page."""
    run = run_selectors.run_get(principal=console.principal, run_id=run_id, related=("plan",))
    audit_note(request, object_id=run.id, project=run.project)
    raw_checkpoint = request.POST.get("checkpoint", "")
    reason = request.POST.get("reason", "").strip()[:500]
    try:
        checkpoint = parse_int(raw_checkpoint)
        if checkpoint is None:
            raise ValidationFailed(
                "checkpoint must be a checkpoint number", details={"checkpoint": ["required"]}
            )
        raw_patch = request.POST.get("state_patch", "").strip()
        patch = parse_json(raw_patch, field="state_patch") if raw_patch else None
        child = run_fork(
            run=run,
            checkpoint_seq=checkpoint,
            state_patch=patch,
            reason=reason,
            actor=console.principal.actor,
        )
    except DomainError as exc:
        _refused(request, exc, checkpoint=raw_checkpoint, reason=reason, via="console")
        fresh = _page_run(console, run.id)
        return _run_page(request, console, fresh, error=ActionError.of(exc, run.id))
    audit_note(
        request,
        details={
            "checkpoint": checkpoint,
            "fork": str(child.id),
            "reason": reason,
            "via": "console",
        },
    )
    messages.success(
        request,
        f"Forked run {display.short_id(run.id)} at checkpoint {checkpoint}: this is the new run.",
    )
    return redirect("console:run", run_id=child.id)


@require_POST
@console_page(grant="runs:write", action="run.replay", object_type="run")
def run_replay_view(request: HttpRequest, console: Console, run_id: uuid.UUID) -> HttpResponse:
    """The "Replay" button: re-execute the finished run against the current code from its record (no
    provider, no tool, no effect is called), then the replay's page with its report."""
    run = run_selectors.run_get(principal=console.principal, run_id=run_id, related=("plan",))
    audit_note(request, object_id=run.id, project=run.project)
    try:
        replay = replay_run(run=run, actor=console.principal.actor)
    except DomainError as exc:
        _refused(request, exc, via="console")
        fresh = _page_run(console, run.id)
        return _run_page(request, console, fresh, error=ActionError.of(exc, run.id))
    identical = bool((replay.output or {}).get("identical"))
    audit_note(
        request, details={"replay": str(replay.id), "identical": identical, "via": "console"}
    )
    messages.success(
        request,
        "Replayed: no difference." if identical else "Replayed: the replay differs (below).",
    )
    return redirect("console:run", run_id=replay.id)


@dataclass
class RunCompareColumn:
    """One side of the branch compare page."""

    label: str
    run: Run
    chunks: list[dict[str, Any]]
    more: int
    chunks_from: int
    effects: list[EffectRecord]
    effects_more: int
    branch_checkpoint: int | None
    timeline: list[dict[str, Any]]


def _compare_column(label: str, side: Any) -> RunCompareColumn:
    return RunCompareColumn(
        label=label,
        run=side.run,
        chunks=[
            display.chunk_view(dict(c), session_id=side.run.session_id)
            for c in ChunkOut(side.chunks, many=True).data
        ],
        more=side.chunks_more,
        chunks_from=side.chunks_from,
        effects=side.effects,
        effects_more=side.effects_more,
        branch_checkpoint=side.branch_checkpoint,
        timeline=[segment.as_dict() for segment in side.timeline],
    )


@require_GET
@console_page()
def run_compare_view(
    request: HttpRequest, console: Console, run_id: uuid.UUID, other_id: uuid.UUID
) -> HttpResponse:
    """Two runs of one fork lineage: where their histories part, the state diff, each one's
    chunks after the shared prefix side by side, and the effects each history recorded since
    (``runs_app.services.compare``)."""
    principal = console.principal
    a = run_selectors.run_get(principal=principal, run_id=run_id, related=("project",))
    b = run_selectors.run_get(principal=principal, run_id=other_id, related=("project",))
    comparison: RunComparison | None = None
    error: ActionError | None = None
    try:
        comparison = run_compare(a, b)
    except DomainError as exc:
        error = ActionError.of(exc)
    context: dict[str, Any] = {"a": a, "b": b, "error": error, "comparison": comparison}
    if comparison is not None:
        context |= {
            "columns": [_compare_column("A", comparison.a), _compare_column("B", comparison.b)],
            "state_rows": display.diff_rows(comparison.state_diff),
        }
    return render(
        request,
        "console/run_compare.html",
        _base(console, **context),
        status=error.status if error is not None else 200,
    )


# --- Sessions ------------------------------------------------------------------------------------


@require_GET
@console_page()
def sessions(request: HttpRequest, console: Console) -> HttpResponse:
    qs = _filtered(session_selectors.session_list(principal=console.principal), console)
    rows, next_before = _keyset(qs.select_related("project"), request)
    agents = session_agents(console.principal, rows)
    return render(
        request,
        "console/sessions.html",
        _base(
            console,
            sessions=[(s, agents.get(s.id, [])) for s in rows],
            next_before=next_before,
            first_page="before" in request.GET,
        ),
    )


def session_agents(principal: Principal, sessions: list[Session]) -> dict[uuid.UUID, list[str]]:
    """The agents of each session: its own ``agent`` and those of the chunks it stores (one
    query for the page; chunks a fork shares with its parent are the parent's)."""
    agents: dict[uuid.UUID, set[str]] = {s.id: {s.agent} if s.agent else set() for s in sessions}
    rows = (
        Chunk.objects.for_principal(principal)
        .filter(session_id__in=list(agents))
        .exclude(agent="")
        .values_list("session_id", "agent")
        .order_by("session_id", "agent")
        .distinct()
    )
    for session_id, agent in rows:
        agents[session_id].add(agent)
    return {session_id: sorted(names) for session_id, names in agents.items()}


@require_GET
@console_page()
def session_detail(request: HttpRequest, console: Console, session_id: uuid.UUID) -> HttpResponse:
    session = session_selectors.session_get(principal=console.principal, session_id=session_id)
    return session_page(request, console, session)


def session_page(
    request: HttpRequest,
    console: Console,
    session: Session,
    *,
    start_error: ActionError | None = None,
    start_form: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    """The session page; with the "start a run" form's refusal and what was typed, when a
    start from it was refused (``console.start_run``)."""
    length = session.length
    after = parse_int(request.GET.get("after"))
    if after is None or after < -1:
        after = max(-1, length - 1 - CHUNKS_SHOWN)
    page = session_selectors.chunk_page(session.id, after=after, limit=CHUNKS_SHOWN, upto=length)
    chunks = [
        display.chunk_view(dict(c), session_id=session.id) for c in ChunkOut(page, many=True).data
    ]
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
            kind_counts=session_kind_counts(console.principal, session),
            agent_usage=session_agent_usage(console.principal, session),
            live_config={
                "kind": "session",
                "id": str(session.id),
                "after": last_seq,
                "ws_path": f"/ws/sessions/{session.id}/",
                "api_path": f"/api/v1/sessions/{session.id}/",
            },
            can_start=console.principal.has_grant("runs:write"),
            start_workflows=sorted(e.name for e in registration.workflows().all()),
            input_policies=INPUT_POLICIES,
            start_error=start_error,
            start_form=start_form or {},
        ),
        status=status,
    )


def _own_chunks(principal: Principal, session: Session) -> QuerySet[Chunk]:
    """The chunks the session stores itself (a fork's inherited ones are its parent's)."""
    return Chunk.objects.for_principal(principal).filter(session=session)


def session_kind_counts(principal: Principal, session: Session) -> list[tuple[str, int]]:
    """How many chunks of each kind the session stores itself, in the kinds' order."""
    counts = dict(
        _own_chunks(principal, session)
        .values_list("kind")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("kind", "n")
    )
    return [(display.KIND_LABELS[k], counts[k]) for k in display.KIND_LABELS if counts.get(k)]


def session_agent_usage(principal: Principal, session: Session) -> list[dict[str, Any]]:
    """Token usage of the session's own chunks per agent (most tokens first), summed in the
    database from each chunk's ``usage``. One query."""

    def total(key: str, field_type: Any) -> Any:
        return Coalesce(
            Sum(Cast(KeyTextTransform(key, "usage"), field_type)), 0, output_field=field_type
        )

    rows = (
        _own_chunks(principal, session)
        .values("agent")
        .annotate(
            chunks=Count("id"),
            prompt=total("prompt_tokens", IntegerField()),
            completion=total("completion_tokens", IntegerField()),
            cost=total("cost_usd", FloatField()),
        )
        .order_by()
    )
    found = [{**row, "agent": row["agent"] or "(no agent)"} for row in rows]
    return sorted(found, key=lambda r: (-(r["prompt"] + r["completion"]), r["agent"]))


def lineage_data(
    session: Session, *, principal: Principal, limit: int | None = None
) -> dict[str, Any]:
    """The first page of the session's lineage graph, in the lineage API's shape, each node
    with the agents of its own chunks (``agents``, dominant first; the session's producing
    agent when no chunk names one); ``next`` is the API address of the following page."""
    limit = limit or LINEAGE_PAGE
    page = session_selectors.lineage_page(session, direction="graph", limit=limit)
    next_url = None
    if page.next_after:
        next_url = (
            f"/api/v1/sessions/{session.id}/lineage/?direction=graph&limit={limit}"
            f"&after={page.next_after}"
        )
    agents = session_selectors.lineage_node_agents(principal, [node.id for node in page.nodes])
    nodes = LineageNodeOut(page.nodes, many=True, context={"agents": agents}).data
    return {
        "session": str(session.id),
        "nodes": nodes,
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
    lineage = lineage_data(session, principal=console.principal)
    return render(
        request,
        "console/lineage.html",
        _base(
            console,
            session=session,
            lineage=lineage,
            compare_b=next(
                (
                    str(n["id"])
                    for n in reversed(lineage["nodes"])
                    if str(n["id"]) != str(session.id)
                ),
                str(session.id),
            ),
            assets_installed=vendor_assets_installed(),
            session_url_template=reverse("console:session", args=[uuid.UUID(int=0)]),
            page_size=LINEAGE_PAGE,
        ),
    )


# --- Branch compare ------------------------------------------------------------------------------

#: How far back the compare page looks for a common ancestor, and how many chunks it compares.
COMPARE_DEPTH = 64
COMPARE_PREFIX_CHUNKS = 5000


def _ancestors(principal: Principal, session_id: uuid.UUID) -> dict[uuid.UUID, int]:
    """The session and its lineage ancestors (every op), with their distance. One query per
    generation, at most ``COMPARE_DEPTH``."""
    found = {session_id: 0}
    frontier = [session_id]
    for depth in range(1, COMPARE_DEPTH + 1):
        parents = list(
            LineageEdge.objects.for_principal(principal)
            .filter(child_id__in=frontier)
            .values_list("parent_id", flat=True)
        )
        frontier = [p for p in parents if p not in found]
        if not frontier:
            break
        for parent in frontier:
            found[parent] = depth
    return found


def common_ancestor(
    principal: Principal, a: uuid.UUID, b: uuid.UUID
) -> tuple[uuid.UUID | None, int]:
    """The nearest session both descend from (or one of the two, when one descends from the
    other), and the sum of the two distances to it; ``(None, 0)`` when they share none."""
    of_a = _ancestors(principal, a)
    of_b = _ancestors(principal, b)
    shared = [(of_a[s] + of_b[s], str(s), s) for s in of_a.keys() & of_b.keys()]
    if not shared:
        return None, 0
    distance, _, session_id = min(shared)
    return session_id, distance


def shared_prefix(a: Session, b: Session) -> int:
    """How many leading chunks the two sessions' logical lists share: the same stored chunk
    rows (a fork shares its parent's chunks up to the fork point, never copies them)."""
    limit = min(a.length, b.length, COMPARE_PREFIX_CHUNKS)
    rows_a = session_selectors.chunk_page(a.id, after=-1, limit=limit, upto=a.length)
    rows_b = session_selectors.chunk_page(b.id, after=-1, limit=limit, upto=b.length)
    shared = 0
    for one, other in zip(rows_a, rows_b, strict=False):
        if one.pk != other.pk:
            break
        shared += 1
    return shared


@dataclass
class CompareSide:
    session: Session
    chunks: list[dict[str, Any]]
    more: int
    agents: list[str]


@require_GET
@console_page()
def session_compare(request: HttpRequest, console: Console) -> HttpResponse:
    """Two sessions side by side from where they diverge: their common ancestor, the chunks
    they share (counted, not repeated) and each one's chunks after that."""
    principal = console.principal
    picked = [request.GET.get("a", ""), request.GET.get("b", "")]
    if not all(picked):
        return render(
            request,
            "console/compare.html",
            _base(console, sides=[], picked=picked, ancestor=None, shared=0),
        )
    a, b = (session_selectors.session_get(principal=principal, session_id=p) for p in picked)
    ancestor_id, distance = common_ancestor(principal, a.id, b.id)
    ancestor = (
        session_selectors.session_list(principal=principal).filter(id=ancestor_id).first()
        if ancestor_id
        else None
    )
    shared = shared_prefix(a, b)
    agents = session_agents(principal, [a, b])
    sides = []
    for session in (a, b):
        page = session_selectors.chunk_page(
            session.id, after=shared - 1, limit=CHUNKS_SHOWN, upto=session.length
        )
        sides.append(
            CompareSide(
                session=session,
                chunks=[
                    display.chunk_view(dict(c), session_id=session.id)
                    for c in ChunkOut(page, many=True).data
                ],
                more=max(0, session.length - shared - len(page)),
                agents=agents.get(session.id, []),
            )
        )
    return render(
        request,
        "console/compare.html",
        _base(
            console,
            sides=sides,
            picked=picked,
            ancestor=ancestor,
            distance=distance,
            shared=shared,
        ),
    )
