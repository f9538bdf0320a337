"""The isolation sweep's world: real objects of tenant A, the principals that must not reach
them, a fingerprint of the database, and the comparison of "not found" bodies.

Tenant A is ``acme`` (the suite's ``tenant``) with project ``research`` (its objects), ``ops``
(where the project-limited token lives) and ``a-only-lab`` (found by slug only by A). Tenant B
is ``globex`` with its ``research`` project and nothing in it but its own retention policy
and pass (:func:`build_other_tenant_rows`, made before the outsiders' "before" answers).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import models
from django.utils import timezone

from effects_app.models import EffectRecord
from memory_app import services as memory_services
from memory_app.models import MemoryEntry, MemoryStats, MemoryTerm
from openrath_project.artifacts import artifact_put
from openrath_project.tenancy.grants import READ_GRANTS
from openrath_project.tenancy.models import (
    ApiToken,
    AuditEvent,
    Membership,
    Project,
    Tenant,
)
from openrath_project.tenancy.services import audit_record, token_create, token_revoke
from retention_app import services as retention_services
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app import reconciler
from runs_app import services as run_services
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent, RunFork, WorkflowPlan
from runs_app.registry import WorkflowRegistry
from runs_app.replay import replay_run
from runs_app.services.forks import run_fork
from schedules_app import services as schedule_services
from schedules_app.models import Schedule, ScheduleFire
from sessions_app import services as session_services
from sessions_app import transfer
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Chunk, LineageEdge, Session
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable
from webhooks_app import services as webhook_services
from webhooks_app.models import WebhookAttempt, WebhookDelivery, WebhookSubscription

#: Text only tenant A's objects hold: none of it may reach another principal.
SECRET = "A-SECRET"
#: A's retention limits: ten years, older than anything of the world.
RETENTION_KEEPS_ALL = 10 * 365 * 24 * 3600
#: Over the 64 KiB inline limit: the run keeps this state value as an artifact.
LARGE = "L" * (70 * 1024)
#: The apps whose model permissions admin staff get in the sweep (as tests/console do).
ADMIN_APPS = (
    "tenancy",
    "sessions_app",
    "runs_app",
    "effects_app",
    "memory_app",
    "schedules_app",
    "webhooks_app",
    "retention_app",
)


@dataclass
class World:
    """Tenant A's objects (and B's few), with the text that identifies A's data."""

    tenant: Tenant
    project: Project
    other_project: Project
    lab: Project
    other_tenant: Tenant
    foreign_project: Project
    session: Session
    fork: Session
    session_digest: str
    waiting_run: Run
    interrupt: Interrupt
    review_run: Run
    effect: EffectRecord
    run_digest: str
    memory: MemoryEntry
    token: ApiToken
    audit: AuditEvent
    users: dict[str, Any]
    export_jsonl: str
    #: A finished run, its fork (driven to its end) and its replay.
    done_run: Run
    run_fork: Run
    replay: Run
    schedule: Schedule
    fire: ScheduleFire
    webhook: WebhookSubscription
    delivery: WebhookDelivery
    attempt: WebhookAttempt
    #: A's retention policy (its limits remove nothing of the world) and the pass it applied.
    retention_policy: RetentionPolicy
    retention_pass: RetentionPass
    #: Placeholders of paths and bodies (``{session}``) -> their value.
    ids: dict[str, str] = field(default_factory=dict)

    def markers(self, *known: str) -> list[str]:
        """Strings that identify A's data: its object ids, digests, usernames and texts (but
        the ``known`` ones: what the caller may know, e.g. its own tenant)."""
        values = [
            SECRET,
            str(self.tenant.id),
            self.tenant.slug,
            self.tenant.name,
            str(self.project.id),
            str(self.other_project.id),
            str(self.lab.id),
            self.lab.slug,
            str(self.session.id),
            str(self.fork.id),
            self.session_digest,
            str(self.waiting_run.id),
            str(self.interrupt.id),
            self.interrupt.request_digest,
            str(self.review_run.id),
            str(self.effect.id),
            self.effect.request_digest,
            self.run_digest,
            str(self.memory.id),
            self.token.prefix,
            str(self.done_run.id),
            str(self.run_fork.id),
            str(self.replay.id),
            str(self.schedule.id),
            str(self.fire.id),
            str(self.webhook.id),
            str(self.delivery.id),
            self.delivery.webhook_id,
            str(self.retention_policy.id),
            *(u.username for u in self.users.values()),
        ]
        return [v for v in values if v and v not in known]


def _approval(registry: WorkflowRegistry, project: Project, report: str) -> Run:
    run, _ = run_services.run_create(
        project=project,
        workflow=registry.get("approval"),
        state={"report": f"{SECRET}-REPORT {report}", "attachment": LARGE},
    )
    return drive(registry, run.id)


def _user(username: str, tenant: Tenant, role: str, *, staff: bool = False, perms: str = "") -> Any:
    user = UserFactory(username=username, is_staff=staff)
    user.save()  # the factory sets the password without saving it
    MembershipFactory(user=user, tenant=tenant, role=role)
    if perms:
        found = Permission.objects.filter(content_type__app_label__in=ADMIN_APPS)
        if perms == "view":
            found = found.filter(codename__startswith="view_")
        user.user_permissions.set(found)
    return user


def build_world(
    registry: WorkflowRegistry,
    *,
    tenant: Tenant,
    project: Project,
    other_project: Project,
    other_tenant: Tenant,
    foreign_project: Project,
) -> World:
    """Tenant A's objects: a session with chunks (one an artifact), its fork, a run waiting on
    its approval, a run stopped on an ambiguous effect, a finished run with its fork and its
    replay, a schedule with a fire, a webhook subscription with a delivery and its attempt, a
    retention policy with a pass, a memory entry, audit rows, a token."""
    lab = ProjectFactory(tenant=tenant, slug="a-only-lab", name=f"{SECRET} lab")
    artifact = artifact_put(
        tenant_id=tenant.id, data=f"{SECRET}-ARTIFACT".encode(), media_type="text/plain"
    )
    session = session_services.session_create(
        project=project,
        title=f"{SECRET}-TITLE",
        metadata={"note": f"{SECRET}-METADATA"},
        chunks=[
            make_draft(role="user", content={"text": f"{SECRET}-CHUNK question"}),
            make_draft(role="assistant", content={"text": f"{SECRET}-CHUNK answer"}),
            make_draft(
                role="tool",
                kind="artifact",
                content={"digest": artifact.digest, "media_type": "text/plain"},
            ),
        ],
    )
    fork = session_services.session_fork(session=session, title=f"{SECRET}-FORK")

    waiting_run = _approval(registry, project, "one")
    assert waiting_run.status == "waiting", waiting_run.error
    interrupt = Interrupt.objects.get(run=waiting_run)

    review_run = _approval(registry, project, "two")
    interrupt_resolve(
        interrupt=Interrupt.objects.get(run=review_run),
        decision="approve",
        response={"note": f"{SECRET}-NOTE"},
        actor="user:setup",
    )
    durable.CRASH["publish"] = True
    with pytest.raises(KeyboardInterrupt):
        drive(registry, review_run.id)
    Run.objects.filter(id=review_run.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    reconciler.reconcile()
    review_run = drive(registry, review_run.id)
    assert review_run.status == "needs_review", review_run.error
    effect = EffectRecord.objects.get(run=review_run)
    assert effect.status == "needs_review"

    reference = Run.objects.get(id=waiting_run.id).input["attachment"]["$artifact"]
    done_run, _ = run_services.run_create(
        project=project, workflow=registry.get("linear"), state={"who": f"{SECRET}-WHO"}
    )
    done_run = drive(registry, done_run.id)
    assert done_run.status == "succeeded", done_run.error
    child = run_fork(run=done_run, checkpoint_seq=0, actor="user:setup", registry=registry)
    child = drive(registry, child.id)
    replay = replay_run(run=done_run, actor="user:setup", registry=registry)
    schedule = schedule_services.schedule_create(
        project=project,
        workflow="approval",
        kind="interval",
        interval_seconds=3600,
        input={"report": f"{SECRET}-SCHEDULED"},
        name=f"{SECRET}-SCHEDULE",
        created_by="user:setup",
    )
    fire = ScheduleFire.objects.create(
        tenant_id=tenant.id,
        project=project,
        schedule=schedule,
        tick=timezone.now() - timedelta(hours=1),
        fired_at=timezone.now() - timedelta(hours=1),
        outcome="skipped",
        detail={"note": f"{SECRET}-FIRE"},
    )
    # Last, so the runs above enqueue nothing for it; a loopback target (the sweep's settings
    # allow private targets), never called: no delivery worker runs here.
    webhook, _ = webhook_services.webhook_create(
        project=project,
        url="http://127.0.0.1:9/a-secret-hook",
        event_types=["run.succeeded"],
        description=f"{SECRET}-WEBHOOK",
        created_by="user:setup",
    )
    delivery_id = uuid.uuid4()
    delivery = WebhookDelivery.objects.create(
        id=delivery_id,
        tenant_id=tenant.id,
        project=project,
        subscription=webhook,
        webhook_id=f"msg_{delivery_id.hex}",
        source_key=f"{done_run.id}:1:run.succeeded",
        event_type="run.succeeded",
        payload={"type": "run.succeeded", "data": {"note": f"{SECRET}-PAYLOAD"}},
        status="dead",  # given up: a redelivery is allowed
        attempts=1,
    )
    attempt = WebhookAttempt.objects.create(
        tenant_id=tenant.id,
        delivery=delivery,
        number=1,
        started_at=timezone.now(),
        succeeded=False,
        status_code=503,
        latency_ms=5,
        error=f"{SECRET}-ERROR",
    )
    # Limits no object of the world is beyond (an apply, the controls' too, removes nothing);
    # the pass is a real one, its actor A's text.
    retention_policy = retention_services.policy_create(
        project=project,
        created_by=f"{SECRET}-RETENTION",
        runs_max_age_seconds=RETENTION_KEEPS_ALL,
        sessions_max_age_seconds=RETENTION_KEEPS_ALL,
    )
    retention_services.retention_apply(
        policy=retention_policy, trigger="command", actor=f"{SECRET}-RETENTION-PASS"
    )
    retention_pass = RetentionPass.objects.unscoped().get(policy=retention_policy)
    retention_policy.refresh_from_db()
    memory = memory_services.memory_remember(project=project, text=f"{SECRET}-FACT zebra")[0]
    token, _ = token_create(tenant=tenant, name=f"{SECRET}-TOKEN", grants=["runs:read"])
    audit = audit_record(
        actor="user:setup",
        action="isolation.setup",
        outcome="success",
        tenant=tenant,
        project=project,
        object_type="session",
        object_id=str(session.id),
        details={"note": f"{SECRET}-AUDIT"},
    )
    users = {
        "viewer": _user("iso-viewer-a", tenant, "viewer"),
        "admin": _user("iso-admin-a", tenant, "admin"),
        "staff_viewer": _user("iso-staff-viewer-a", tenant, "viewer", staff=True, perms="view"),
    }
    world = World(
        tenant=tenant,
        project=project,
        other_project=other_project,
        lab=lab,
        other_tenant=other_tenant,
        foreign_project=foreign_project,
        session=session,
        fork=fork,
        session_digest=artifact.digest,
        waiting_run=Run.objects.get(id=waiting_run.id),
        interrupt=interrupt,
        review_run=review_run,
        effect=effect,
        run_digest=reference["digest"],
        memory=memory,
        token=token,
        audit=audit,
        users=users,
        export_jsonl="".join(transfer.export_graph(session)),
        done_run=done_run,
        run_fork=child,
        replay=replay,
        schedule=schedule,
        fire=fire,
        webhook=webhook,
        delivery=delivery,
        attempt=attempt,
        retention_policy=retention_policy,
        retention_pass=retention_pass,
    )
    world.ids = {
        "tenant": str(tenant.id),
        "project": str(project.id),
        "lab_slug": lab.slug,
        "session": str(session.id),
        "fork": str(fork.id),
        "session_digest": artifact.digest,
        "run": str(waiting_run.id),
        "review_run": str(review_run.id),
        "run_digest": reference["digest"],
        "interrupt": str(interrupt.id),
        "interrupt_digest": interrupt.request_digest,
        "effect": str(effect.id),
        "effect_digest": effect.request_digest,
        "memory": str(memory.id),
        "token": str(token.id),
        "audit": str(audit.id),
        "plan": waiting_run.plan_id,
        "done_run": str(done_run.id),
        "run_fork": str(child.id),
        "replay": str(replay.id),
        "schedule": str(schedule.id),
        "schedule_fire": str(fire.id),
        "webhook": str(webhook.id),
        "delivery": str(delivery.id),
        "webhook_attempt": str(attempt.id),
        "retention_policy": str(retention_policy.id),
        "retention_pass": str(retention_pass.id),
        "retention_actor": retention_pass.actor,
    }
    return world


@dataclass(frozen=True)
class OtherTenantRows:
    """B's own retention policy (limits that would remove everything B has) and its pass."""

    policy: RetentionPolicy
    passed: RetentionPass


def build_other_tenant_rows(foreign_project: Project) -> OtherTenantRows:
    """B's retention policy and a pass it applied, made before A has any object: B's lists and
    pass log show them, before and after, and nothing of A's joins them."""
    policy = retention_services.policy_create(
        project=foreign_project,
        created_by="user:b-setup",
        runs_keep_last=0,
        sessions_keep_last=0,
        events_keep_last=1,
        checkpoints_keep_last=1,
        artifacts_grace_seconds=3600,
    )
    retention_services.retention_apply(policy=policy, trigger="command", actor="user:b-setup")
    policy.refresh_from_db()
    return OtherTenantRows(policy, RetentionPass.objects.unscoped().get(policy=policy))


# --- Principals ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tokens:
    """Raw bearer tokens: A's owner (the control), and the principals of the sweep."""

    owner: str
    revoked: str
    other_tenant: str
    other_project: str
    viewer: str


def make_tokens(
    *, tenant: Tenant, project: Project, other_project: Project, other_tenant: Tenant
) -> Tokens:
    def raw(tenant: Tenant, name: str, grants: Any, projects: Any = ()) -> str:
        return token_create(tenant=tenant, name=name, grants=list(grants), projects=projects)[1]

    revoked = raw(tenant, "iso-revoked", ["*"])
    token_revoke(prefix=revoked)
    return Tokens(
        owner=raw(tenant, "iso-owner", ["*"]),
        revoked=revoked,
        other_tenant=raw(other_tenant, "iso-other-tenant", ["*"]),
        other_project=raw(tenant, "iso-other-project", ["*"], [other_project]),
        viewer=raw(tenant, "iso-viewer", sorted(READ_GRANTS), [project]),
    )


def other_tenant_users(other_tenant: Tenant) -> dict[str, Any]:
    """B's console admin and B's admin-site staff (every model permission: scope limits them)."""
    return {
        "user": _user("iso-admin-b", other_tenant, "admin"),
        "staff": _user("iso-staff-b", other_tenant, "admin", staff=True, perms="all"),
    }


# --- The database, before and after a refused request --------------------------------------------

_IGNORED_FIELDS = {ApiToken: {"last_used_at"}, get_user_model(): {"last_login"}}


def _rows(model: type[models.Model]) -> list[tuple[Any, ...]]:
    ignored = _IGNORED_FIELDS.get(model, set())
    names = [f.attname for f in model._meta.concrete_fields if f.attname not in ignored]
    return list(model.objects.order_by("pk").values_list(*names))


FINGERPRINTED: tuple[type[models.Model], ...] = (
    Tenant,
    Project,
    Membership,
    ApiToken,
    Session,
    Chunk,
    LineageEdge,
    WorkflowPlan,
    Run,
    RunEvent,
    Checkpoint,
    Interrupt,
    EffectRecord,
    MemoryEntry,
    MemoryStats,
    Group,
    RunFork,
    Schedule,
    ScheduleFire,
    WebhookSubscription,
    WebhookDelivery,
    WebhookAttempt,
    RetentionPolicy,
    RetentionPass,
)


def fingerprint() -> dict[str, Any]:
    """Every row of every table a request could change (the audit log aside: denials are
    audited), with every field but the ones reads touch (a token's ``last_used_at``)."""
    found: dict[str, Any] = {m._meta.label: _rows(m) for m in FINGERPRINTED}
    found["memory_app.MemoryTerm"] = MemoryTerm.objects.count()
    user_model = get_user_model()
    found[user_model._meta.label] = _rows(user_model)
    found["token_projects"] = sorted(
        ApiToken.projects.through.objects.values_list("apitoken_id", "project_id")
    )
    return found


def fingerprint_diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [label for label in before if before[label] != after[label]]


def audit_watermark() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def audit_successes_since(watermark: int) -> list[tuple[str, str]]:
    """Audit rows since ``watermark`` that record a success: a refused request has none."""
    rows = AuditEvent.objects.filter(id__gt=watermark, outcome="success").order_by("id")
    return list(rows.values_list("action", "actor"))


# --- Comparing answers ---------------------------------------------------------------------------

_CSRF = [
    re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]+'),
    re.compile(r'(name="csrf-token" content=")[^"]+'),
]


def normalized(body: bytes | str, *replacements: str) -> bytes:
    """The body with the caller's own inputs and per-response CSRF tokens blanked, so two
    answers can be compared byte for byte."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    for value in sorted(replacements, key=len, reverse=True):
        if value:
            # Whole values only: the input "3" is not the 3 of "403" nor the 1 of "1.0"; a short
            # one (a small integer id) only where an id goes: in a path or between quotes.
            if len(value) >= 6:
                whole = rf"(?<![0-9A-Za-z.]){re.escape(value)}(?![0-9A-Za-z.])"
            else:
                whole = rf"(?<=[/“\"]){re.escape(value)}(?=[/”\"])"
            text = re.sub(whole, "<INPUT>", text)
    for pattern in _CSRF:
        text = pattern.sub(r"\1<CSRF>", text)
    return text.encode()


def leaked(body: bytes, markers: list[str], *own_inputs: str) -> list[str]:
    """The markers of A's data found in the body (what the caller sent itself excluded)."""
    text = normalized(body, *own_inputs).decode()
    return [m for m in markers if m in text]


def random_like(value: str) -> str:
    """A value of the same shape that names nothing: a fresh UUID, digest or slug."""
    if value.isdigit():
        return str(10**12 + uuid.uuid4().int % 10**9)
    if re.fullmatch(r"[0-9a-f]{64}", value):
        return uuid.uuid4().hex + uuid.uuid4().hex
    try:
        uuid.UUID(value)
    except ValueError:
        return f"no-such-{uuid.uuid4().hex[:8]}"
    return str(uuid.uuid4())
