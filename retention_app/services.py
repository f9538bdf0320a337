"""Retention writes: policies (create, change, delete) and the pass that applies one.

A pass loads the project's lineage graph, lets :mod:`retention_app.planning` decide, and then
deletes in bounded batches, each batch one transaction: run families (their effects,
interrupts, events, checkpoints and fork edges first, then the runs), then sessions (their
lineage edges and chunks, then the sessions), then the events and checkpoints of kept terminal
runs (the first kept checkpoint of a pruned chain is rewritten as a keyframe in the same
transaction, so every kept checkpoint still rebuilds to its digest), then artifacts no kept row
of the tenant mentions. Each batch re-checks, under row locks, what the plan assumed (the runs
are still terminal, nothing pending); anything else a concurrent writer adds (a fork of a
session being deleted, an append to it) meets a foreign key and rolls the batch back, and the
next pass plans again. A dry run computes the same plan and reports counts and bytes.

The runtime database role may not delete events, checkpoints or fork edges (they are
append-only for it); on PostgreSQL those deletes go through the ``SECURITY DEFINER`` functions
of migration 0002, which act only on terminal runs. Audit rows are never removed by a pass.

Locking: a batch locks its runs (or sessions) in id order, then deletes what belongs to them.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import DatabaseError, IntegrityError, connection, models, transaction
from django.db.models import Min, Q, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Length
from django.utils import timezone

from effects_app.models import EffectRecord
from openrath_project import artifacts
from openrath_project.errors import Conflict, DomainError, ValidationFailed
from openrath_project.jsontext import digest as state_digest
from openrath_project.tenancy.models import Project
from openrath_project.tenancy.services import audit_record
from retention_app import planning
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent, RunFork
from runs_app.state_delta import apply as apply_delta
from sessions_app.models import Chunk, LineageEdge, Session

logger = logging.getLogger(__name__)

TERMINAL = sorted(planning.TERMINAL_STATUSES)
#: Effect statuses that are evidence still waiting for an outcome: their run is never removed.
UNRESOLVED_EFFECTS = ("prepared", "started", "needs_review")
#: Fields a PATCH may change (the project is fixed at creation).
LIMIT_FIELDS = (
    "runs_max_age_seconds",
    "runs_keep_last",
    "sessions_max_age_seconds",
    "sessions_keep_last",
    "events_max_age_seconds",
    "events_keep_last",
    "checkpoints_max_age_seconds",
    "checkpoints_keep_last",
    "artifacts_grace_seconds",
)
CHANGEABLE = frozenset({*LIMIT_FIELDS, "enabled", "interval_seconds"})
MIN_ARTIFACT_GRACE_SECONDS = 3600
MIN_INTERVAL_SECONDS = 60
#: A new policy's first reconciler pass waits this long: time to read its dry run first.
FIRST_PASS_DELAY = timedelta(minutes=5)
#: A pass that stopped at its budget with work left comes back this soon.
CONTINUE_AFTER = timedelta(seconds=15)
#: How long a reconciler holds a policy it claimed before another may take it over.
CLAIM_SECONDS = 600
#: Ids listed in a dry run's sample, per kind.
SAMPLE = 50

# Relations to runs and sessions the pass handles itself; any other foreign key pointing at a
# run or a session pins it (PROTECT and unknown rules) or is cleared (SET_NULL).
#: A run's own references to other runs besides its fan-out parent and replay source (the run
#: it was queued after, the run that replaced it): the referenced run stays while it does.
_RUN_RUN_FIELDS = tuple(
    f.name
    for f in Run._meta.concrete_fields
    if f.is_relation and f.related_model is Run and f.name not in ("parent", "replay_of")
)
_RUN_RELATIONS = {
    (Run, "parent"),
    (Run, "replay_of"),
    *((Run, name) for name in _RUN_RUN_FIELDS),
    (RunFork, "parent"),
    (RunFork, "child"),
    (RunEvent, "run"),
    (Checkpoint, "run"),
    (Interrupt, "run"),
    (EffectRecord, "run"),
}
#: A run's own references to sessions (its working session, the session it was submitted on):
#: such a session stays while the run does, and may go with it.
_RUN_SESSION_FIELDS = tuple(
    f.name for f in Run._meta.concrete_fields if f.is_relation and f.related_model is Session
)
_SESSION_RELATIONS = {
    (Session, "base"),
    (Chunk, "session"),
    (LineageEdge, "parent"),
    (LineageEdge, "child"),
    *((Run, name) for name in _RUN_SESSION_FIELDS),
}


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


# --- Policies -----------------------------------------------------------------------------------


def _check_limits(values: dict[str, Any]) -> None:
    for name in LIMIT_FIELDS:
        value = values.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValidationFailed(f"{name} must be a whole number >= 0", details={name: value})
        if name.endswith("_keep_last") and name.startswith(("events", "checkpoints")) and value < 1:
            raise ValidationFailed(
                f"{name} must be at least 1 (a run's last one always stays)",
                details={name: value},
            )
    grace = values.get("artifacts_grace_seconds")
    if grace is not None and grace < MIN_ARTIFACT_GRACE_SECONDS:
        raise ValidationFailed(
            f"artifacts_grace_seconds must be at least {MIN_ARTIFACT_GRACE_SECONDS}: an "
            "artifact written by a step still running is not referenced yet",
            details={"artifacts_grace_seconds": grace},
        )
    interval = values.get("interval_seconds")
    if interval is not None and interval < MIN_INTERVAL_SECONDS:
        raise ValidationFailed(
            f"interval_seconds must be at least {MIN_INTERVAL_SECONDS}",
            details={"interval_seconds": interval},
        )


def policy_create(
    *, project: Project, created_by: str, now: datetime | None = None, **values: Any
) -> RetentionPolicy:
    """A project's retention policy (one per project: a second one is a 409). The reconciler
    applies it first ``FIRST_PASS_DELAY`` after now (a dry run or an explicit apply may come
    sooner)."""
    unknown = set(values) - CHANGEABLE
    if unknown:
        raise ValidationFailed("unknown policy fields", details={"fields": sorted(unknown)})
    _check_limits(values)
    now = now or timezone.now()
    policy = RetentionPolicy(
        tenant_id=project.tenant_id,
        project=project,
        created_by=created_by[:200],
        next_pass_at=now + FIRST_PASS_DELAY,
        **values,
    )
    try:
        with transaction.atomic():
            policy.save(force_insert=True)
    except IntegrityError as exc:
        raise Conflict(
            "the project has a retention policy already; change it instead",
            details={"project": str(project.id)},
        ) from exc
    return policy


def policy_draft(*, project: Project, values: dict[str, Any]) -> RetentionPolicy:
    """An unsaved policy with ``values`` (checked as a create would), for a dry run."""
    unknown = set(values) - CHANGEABLE
    if unknown:
        raise ValidationFailed("unknown policy fields", details={"fields": sorted(unknown)})
    _check_limits(values)
    return RetentionPolicy(
        tenant_id=project.tenant_id, project=project, next_pass_at=timezone.now(), **values
    )


def policy_update(*, policy: RetentionPolicy, changes: dict[str, Any]) -> RetentionPolicy:
    """Change a policy; the reconciler applies it next ``FIRST_PASS_DELAY`` after now."""
    unknown = set(changes) - CHANGEABLE
    if unknown:
        raise ValidationFailed("unknown policy fields", details={"fields": sorted(unknown)})
    merged = {name: getattr(policy, name) for name in CHANGEABLE} | changes
    _check_limits(merged)
    with transaction.atomic():
        locked = RetentionPolicy.objects.unscoped().select_for_update().get(id=policy.id)
        for name, value in changes.items():
            setattr(locked, name, value)
        locked.next_pass_at = timezone.now() + FIRST_PASS_DELAY
        locked.save(update_fields=[*changes, "next_pass_at", "updated_at"])
    return locked


def policy_delete(*, policy: RetentionPolicy) -> None:
    """Delete a policy and its pass log (what it removed stays removed)."""
    RetentionPolicy.objects.unscoped().filter(id=policy.id).delete()


def policy_of(policy: RetentionPolicy) -> planning.Policy:
    """The planner's view of a stored policy."""

    def limits(kind: str) -> planning.Limits:
        age = getattr(policy, f"{kind}_max_age_seconds")
        return planning.Limits(
            max_age=timedelta(seconds=age) if age is not None else None,
            keep_last=getattr(policy, f"{kind}_keep_last"),
        )

    return planning.Policy(
        sessions=limits("sessions"),
        runs=limits("runs"),
        events=limits("events"),
        checkpoints=limits("checkpoints"),
    )


# --- The graph ----------------------------------------------------------------------------------


def _other_relations(
    model: type[models.Model], handled: set[tuple[type[models.Model], str]]
) -> Iterator[tuple[type[models.Model], str, bool]]:
    """``(model, column, set_null)`` of every foreign key to ``model`` the pass does not
    handle itself."""
    for reverse in model._meta.get_fields(include_hidden=True):
        if not (
            reverse.auto_created
            and not reverse.concrete
            and (reverse.one_to_many or reverse.one_to_one)
        ):
            continue
        rel: Any = reverse
        if rel.field is None or not rel.field.concrete:
            continue
        related = rel.related_model
        if (related, rel.field.name) in handled:
            continue
        yield related, rel.field.attname, rel.on_delete is models.SET_NULL


def _foreign_pins(
    model: type[models.Model], handled: set[tuple[type[models.Model], str]], ids: Iterable[Any]
) -> set[str]:
    """Ids among ``ids`` that a relation the pass does not handle points at (``PROTECT`` or a
    rule it does not know): they are pinned. ``SET_NULL`` relations are cleared instead."""
    pinned: set[str] = set()
    id_list = list(ids)
    for related, column, set_null in _other_relations(model, handled):
        if set_null:
            continue
        for part in _chunks(id_list, 1000):
            found = related._base_manager.filter(**{f"{column}__in": part}).values_list(
                column, flat=True
            )
            pinned |= {str(v) for v in found.distinct()}
    return pinned


@dataclass
class Graph:
    """One project's sessions and runs as the planner sees them."""

    sessions: list[planning.SessionNode]
    runs: list[planning.RunNode]


def graph_load(project: Project) -> Graph:
    """Read the project's lineage graph (a handful of queries, no row per object in Python
    beyond the ids and times)."""
    # scope: the project was resolved by the caller (a policy, a scoped read or the command)
    session_rows = list(
        Session.objects.unscoped()
        .filter(project_id=project.id)
        .values_list("id", "created_at", "updated_at", "base_id", "writer_run_id")
    )
    session_ids = {row[0] for row in session_rows}
    parents: dict[uuid.UUID, list[str]] = {}
    for parent, child in (
        LineageEdge.objects.unscoped()
        .filter(child__project_id=project.id)
        .values_list("parent_id", "child_id")
    ):
        parents.setdefault(child, []).append(str(parent))
    pinned_sessions = _foreign_pins(Session, _SESSION_RELATIONS, session_ids)
    sessions = [
        planning.SessionNode(
            id=str(sid),
            created_at=created,
            touched_at=updated,
            base=str(base) if base else None,
            parents=tuple(parents.get(sid, ())),
            pinned=writer is not None or str(sid) in pinned_sessions,
        )
        for sid, created, updated, base, writer in session_rows
    ]
    run_rows = list(
        Run.objects.unscoped()
        .filter(project_id=project.id)
        .values_list(
            "id",
            "status",
            "created_at",
            "updated_at",
            "finished_at",
            "parent_id",
            "replay_of_id",
            *(f"{name}_id" for name in _RUN_RUN_FIELDS),
            *(f"{name}_id" for name in _RUN_SESSION_FIELDS),
        )
    )
    run_ids = {row[0] for row in run_rows}
    forked = dict(
        RunFork.objects.unscoped()
        .filter(project_id=project.id)
        .values_list("child_id", "parent_id")
    )
    referenced: dict[uuid.UUID, set[str]] = {}
    for run_id, session_id in (
        Checkpoint.objects.filter(run__project_id=project.id, session_id__isnull=False)
        .values_list("run_id", "session_id")
        .distinct()
    ):
        referenced.setdefault(run_id, set()).add(str(session_id))
    pinned_runs = {
        str(r)
        for r in Interrupt.objects.unscoped()
        .filter(project_id=project.id, status="pending")
        .values_list("run_id", flat=True)
    }
    pinned_runs |= {
        str(r)
        for r in EffectRecord.objects.unscoped()
        .filter(project_id=project.id, status__in=UNRESOLVED_EFFECTS)
        .values_list("run_id", flat=True)
    }
    pinned_runs |= _foreign_pins(Run, _RUN_RELATIONS, run_ids)
    runs = []
    n_runs = len(_RUN_RUN_FIELDS)
    for rid, status, created, updated, finished, parent, replay_of, *own in run_rows:
        other_runs, own_sessions = own[:n_runs], own[n_runs:]
        sessions_of = set(referenced.get(rid, ()))
        sessions_of |= {str(session_id) for session_id in own_sessions if session_id is not None}
        runs.append(
            planning.RunNode(
                id=str(rid),
                status=status,
                created_at=created,
                touched_at=finished or updated,
                parent=str(parent) if parent else None,
                forked_from=str(forked[rid]) if rid in forked else None,
                replay_of=str(replay_of) if replay_of else None,
                refers_to=tuple(sorted({str(r) for r in other_runs if r is not None} - {str(rid)})),
                sessions=tuple(sorted(sessions_of)),
                pinned=str(rid) in pinned_runs,
            )
        )
    return Graph(sessions=sessions, runs=runs)


def retention_plan(
    *, policy: RetentionPolicy, now: datetime | None = None
) -> tuple[planning.Plan, Graph]:
    """What a pass of ``policy`` would remove now (changes nothing)."""
    graph = graph_load(policy.project)
    plan = planning.plan(
        sessions=graph.sessions,
        runs=graph.runs,
        policy=policy_of(policy),
        now=now or timezone.now(),
    )
    return plan, graph


# --- Measuring (dry runs) -----------------------------------------------------------------------

#: The JSON and text columns whose lengths stand for a row's bytes where the database cannot
#: say (SQLite); PostgreSQL measures whole rows with ``pg_column_size``.
_PAYLOAD = {
    Run: ("input", "state", "output", "error", "next_nodes"),
    RunEvent: ("data",),
    Checkpoint: ("state", "next_nodes"),
    EffectRecord: ("request", "result", "error"),
    Interrupt: ("request", "response"),
    RunFork: ("state_patch",),
    Session: ("metadata", "placement"),
    Chunk: ("content",),
    LineageEdge: (),
}


def _bytes(queryset: models.QuerySet[Any]) -> int:
    model = queryset.model
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(model._meta.db_table)
        total = queryset.aggregate(b=Sum(RawSQL(f"pg_column_size({table}.*)", ())))["b"]  # noqa: S611
        return int(total or 0)
    columns = _PAYLOAD.get(model, ())
    if not columns:
        return 0
    sums = queryset.aggregate(**{c: Sum(Length(Cast(c, models.TextField()))) for c in columns})
    return int(sum(v or 0 for v in sums.values()))


def _measure(queryset: models.QuerySet[Any]) -> dict[str, int]:
    return {"count": queryset.count(), "bytes": _bytes(queryset)}


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _run_querysets(ids: list[str]) -> dict[str, models.QuerySet[Any]]:
    return {
        "runs": Run.objects.unscoped().filter(id__in=ids),
        "events": RunEvent.objects.filter(run_id__in=ids),
        "checkpoints": Checkpoint.objects.filter(run_id__in=ids),
        "effects": EffectRecord.objects.unscoped().filter(run_id__in=ids),
        "interrupts": Interrupt.objects.unscoped().filter(run_id__in=ids),
        "run_forks": RunFork.objects.unscoped().filter(Q(child_id__in=ids) | Q(parent_id__in=ids)),
    }


def _session_querysets(ids: list[str]) -> dict[str, models.QuerySet[Any]]:
    return {
        "sessions": Session.objects.unscoped().filter(id__in=ids),
        "chunks": Chunk.objects.unscoped().filter(session_id__in=ids),
        "lineage_edges": LineageEdge.objects.unscoped().filter(
            Q(child_id__in=ids) | Q(parent_id__in=ids)
        ),
    }


def _add(total: dict[str, dict[str, int]], kind: str, part: dict[str, int]) -> None:
    slot = total.setdefault(kind, {"count": 0, "bytes": 0})
    slot["count"] += part["count"]
    slot["bytes"] += part["bytes"]


@dataclass(frozen=True)
class _Cut:
    """Events and checkpoints of one kept run below these sequence numbers go."""

    run_id: str
    events_below: int
    checkpoints_below: int


def _prune_cuts(run_ids: list[str], policy: planning.Policy, now: datetime) -> list[_Cut]:
    """Where the events and checkpoints of ``run_ids`` (kept terminal runs) are cut: below the
    newest ``keep_last`` and below the first one younger than ``max_age``; a run's last event
    and last checkpoint always stay. A few queries for the whole batch."""
    rows = list(
        Run.objects.unscoped()
        .filter(id__in=run_ids)
        .values_list("id", "event_seq", "checkpoint_seq")
    )
    young_events = _first_young(RunEvent, run_ids, policy.events, now)
    young_checkpoints = _first_young(Checkpoint, run_ids, policy.checkpoints, now)
    cuts = []
    for run_id, event_seq, checkpoint_seq in rows:
        event_cut = _cut(event_seq, policy.events, young_events, run_id)
        checkpoint_cut = _cut(checkpoint_seq, policy.checkpoints, young_checkpoints, run_id)
        if event_cut > 1 or checkpoint_cut > 1:
            cuts.append(_Cut(str(run_id), event_cut, checkpoint_cut))
    return cuts


def _first_young(
    model: type[RunEvent] | type[Checkpoint],
    run_ids: list[str],
    limits: planning.Limits,
    now: datetime,
) -> dict[uuid.UUID, int] | None:
    """Per run, the lowest sequence number of its ``model`` rows younger than ``max_age``
    (``None``: no age limit)."""
    if limits.max_age is None:
        return None
    return dict(
        model.objects.filter(run_id__in=run_ids, created_at__gte=now - limits.max_age)
        .values("run_id")
        .annotate(first=Min("seq"))
        .values_list("run_id", "first")
    )


def _cut(
    last: int,
    limits: planning.Limits,
    young: dict[uuid.UUID, int] | None,
    run_id: uuid.UUID,
) -> int:
    """The lowest sequence number of the run's rows that stays (1: nothing goes)."""
    if last <= 1 or not limits.active:
        return 1
    cut = 1
    if limits.keep_last is not None:
        cut = max(cut, last - limits.keep_last + 1)
    if young is not None:
        cut = max(cut, young.get(run_id, last))
    return min(cut, last)


def _below(cuts: list[_Cut], attr: str) -> Q:
    """Rows of the cut runs below their cut (``attr``: which cut)."""
    condition = Q(pk__in=[])
    for cut in cuts:
        below = getattr(cut, attr)
        if below > 1:
            condition |= Q(run_id=cut.run_id, seq__lt=below)
    return condition


def _whole_at_cut(cuts: list[_Cut]) -> set[str]:
    """Runs whose checkpoint at the cut is stored whole already."""
    condition = Q(pk__in=[])
    for cut in cuts:
        if cut.checkpoints_below > 1:
            condition |= Q(run_id=cut.run_id, seq=cut.checkpoints_below)
    return {
        str(r)
        for r in Checkpoint.objects.filter(condition, full=True).values_list("run_id", flat=True)
    }


@dataclass
class Report:
    """A pass's outcome (or a dry run's forecast): rows by kind with their bytes, checkpoints
    made keyframes, artifacts, what the lineage rules kept, and samples of what goes."""

    project: str
    dry_run: bool
    removed: dict[str, dict[str, int]] = field(default_factory=dict)
    compacted: int = 0
    protected: dict[str, int] = field(default_factory=dict)
    sample: dict[str, list[str]] = field(default_factory=dict)
    complete: bool = True
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "dry_run": self.dry_run,
            "removed": self.removed,
            "compacted_checkpoints": self.compacted,
            "protected": self.protected,
            "sample": self.sample,
            "complete": self.complete,
            "failures": self.failures,
        }


def retention_dry_run(*, policy: RetentionPolicy, now: datetime | None = None) -> Report:
    """What a pass of ``policy`` would remove now, with counts and bytes. Changes nothing."""
    now = now or timezone.now()
    plan, _ = retention_plan(policy=policy, now=now)
    report = Report(project=str(policy.project_id), dry_run=True, protected=dict(plan.protected))
    report.sample = {"runs": plan.runs[:SAMPLE], "sessions": plan.sessions[:SAMPLE]}
    for batch in _chunks(plan.runs, 500):
        for kind, queryset in _run_querysets(batch).items():
            _add(report.removed, kind, _measure(queryset))
    for batch in _chunks(plan.sessions, 500):
        for kind, queryset in _session_querysets(batch).items():
            _add(report.removed, kind, _measure(queryset))
    limits = policy_of(policy)
    for batch in _chunks(plan.prunable_runs, 500):
        cuts = _prune_cuts(batch, limits, now)
        if not cuts:
            continue
        _add(
            report.removed,
            "events",
            _measure(RunEvent.objects.filter(_below(cuts, "events_below"))),
        )
        _add(
            report.removed,
            "checkpoints",
            _measure(Checkpoint.objects.filter(_below(cuts, "checkpoints_below"))),
        )
        whole = _whole_at_cut(cuts)
        report.compacted += sum(
            1 for c in cuts if c.checkpoints_below > 1 and c.run_id not in whole
        )
    if policy.artifacts_grace_seconds is not None:
        doomed = _unreferenced_artifacts(policy.tenant_id, _tenant_grace(policy), now)
        _add(
            report.removed,
            "artifacts",
            {"count": len(doomed), "bytes": sum(size for _, size in doomed)},
        )
    return report


# --- Applying ---------------------------------------------------------------------------------


class _Budget:
    """A pass's time budget (``None``: none)."""

    def __init__(self, seconds: float | None) -> None:
        self.deadline = time.monotonic() + seconds if seconds is not None else None

    @property
    def spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def _pg() -> bool:
    return connection.vendor == "postgresql"


def _delete_runs(ids: list[str]) -> dict[str, int]:
    """Delete the terminal runs ``ids`` with their events, checkpoints and fork edges (those
    are append-only for the runtime role: on PostgreSQL ``retention_delete_runs`` does it, and
    acts on terminal runs only)."""
    if _pg():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT events, checkpoints, forks, runs FROM retention_delete_runs(%s::uuid[])",
                [ids],
            )
            events, checkpoints, forks, runs = cursor.fetchone()
        return {"events": events, "checkpoints": checkpoints, "run_forks": forks, "runs": runs}
    out = {}
    for kind, queryset in (
        ("events", RunEvent.objects.filter(run_id__in=ids)),
        ("checkpoints", Checkpoint.objects.filter(run_id__in=ids)),
        (
            "run_forks",
            RunFork.objects.unscoped().filter(Q(child_id__in=ids) | Q(parent_id__in=ids)),
        ),
        ("runs", Run.objects.unscoped().filter(id__in=ids, status__in=TERMINAL)),
    ):
        out[kind] = queryset._raw_delete(queryset.db)
    return out


def _delete_run_batch(ids: list[str], families: dict[str, list[str]]) -> tuple[dict[str, int], int]:
    """One transaction: lock the runs, drop the families that stopped being deletable, delete
    the rest with what belongs to them. Returns the counts and the families dropped."""
    counts: dict[str, int] = {}
    with transaction.atomic():
        rows = list(
            Run.objects.unscoped()
            .select_for_update()
            .filter(id__in=ids)
            .order_by("id")
            .values_list("id", "status")
        )
        blocked = {str(r) for r, status in rows if status not in planning.TERMINAL_STATUSES}
        blocked |= {
            str(r)
            for r in Interrupt.objects.unscoped()
            .filter(run_id__in=ids, status="pending")
            .values_list("run_id", flat=True)
        }
        blocked |= {
            str(r)
            for r in EffectRecord.objects.unscoped()
            .filter(run_id__in=ids, status__in=UNRESOLVED_EFFECTS)
            .values_list("run_id", flat=True)
        }
        dropped = 0
        if blocked:
            keep = {m for members in families.values() for m in members if blocked & set(members)}
            dropped = sum(1 for members in families.values() if blocked & set(members))
            ids = [i for i in ids if i not in keep]
        if not ids:
            return counts, dropped
        pinned = _foreign_pins(Run, _RUN_RELATIONS, ids)
        if pinned:  # a row of another app began pointing at one of them after the plan
            keep = {m for members in families.values() for m in members if pinned & set(members)}
            dropped += sum(1 for members in families.values() if pinned & set(members))
            ids = [i for i in ids if i not in keep]
            if not ids:
                return counts, dropped
        for related, column, set_null in _other_relations(Run, _RUN_RELATIONS):
            if set_null:
                related._base_manager.filter(**{f"{column}__in": ids}).update(**{column: None})
        # Foreign keys are checked at commit (deferred), so rows of the batch that point at
        # each other (an effect's ancestor, a branch's parent, a replay's source) go together.
        effects = EffectRecord.objects.unscoped().filter(run_id__in=ids)
        counts["effects"] = effects._raw_delete(effects.db)
        interrupts = Interrupt.objects.unscoped().filter(run_id__in=ids)
        counts["interrupts"] = interrupts._raw_delete(interrupts.db)
        counts |= _delete_runs(ids)
    return counts, dropped


def _delete_session_batch(ids: list[str]) -> dict[str, int]:
    """One transaction: lock the sessions, skip those a run started writing meanwhile, delete
    their lineage edges, chunks and rows."""
    counts: dict[str, int] = {}
    with transaction.atomic():
        rows = list(
            Session.objects.unscoped()
            .select_for_update()
            .filter(id__in=ids)
            .order_by("id")
            .values_list("id", "writer_run_id")
        )
        busy = {str(sid) for sid, writer in rows if writer is not None}
        for name in _RUN_SESSION_FIELDS:
            busy |= {
                str(s)
                for s in Run.objects.unscoped()
                .filter(**{f"{name}_id__in": ids})
                .values_list(f"{name}_id", flat=True)
            }
        # A session given a child since the plan (a fork or merge made meanwhile) is now an
        # ancestor of a kept session: it stays, as do its edges.
        busy |= {
            str(s)
            for s in LineageEdge.objects.unscoped()
            .filter(Q(parent_id__in=ids))
            .exclude(Q(child_id__in=ids))
            .values_list("parent_id", flat=True)
        }
        ids = [i for i in ids if i not in busy]
        if not ids:
            return counts
        for kind, queryset in _session_querysets(ids).items():
            if kind != "sessions":
                counts[kind] = queryset._raw_delete(queryset.db)
        sessions = Session.objects.unscoped().filter(id__in=ids)
        counts["sessions"] = sessions._raw_delete(sessions.db)
    return counts


def _rebuild_many(cuts: list[_Cut]) -> dict[str, dict[str, Any]]:
    """The whole state at each cut's checkpoint, from the last keyframe at or before it (one
    query for the batch), each checked against its digest: a chain that does not rebuild
    stops the batch before anything is deleted."""
    if not cuts:
        return {}
    condition = Q(pk__in=[])
    for cut in cuts:
        condition |= Q(run_id=cut.run_id, seq__lte=cut.checkpoints_below)
    chains: dict[str, list[tuple[int, bool, Any, str]]] = {}
    for run_id, seq, full, stored, row_digest in (
        Checkpoint.objects.filter(condition)
        .order_by("run_id", "seq")
        .values_list("run_id", "seq", "full", "state", "state_digest")
        .iterator(chunk_size=2000)
    ):
        chains.setdefault(str(run_id), []).append((seq, full, stored, row_digest))
    out: dict[str, dict[str, Any]] = {}
    for cut in cuts:
        chain = chains.get(cut.run_id, [])
        start = max((i for i, row in enumerate(chain) if row[1]), default=None)
        if start is None or chain[-1][0] != cut.checkpoints_below:
            raise DomainError(
                f"checkpoint {cut.checkpoints_below} of run {cut.run_id} has no keyframe before it"
            )
        state: dict[str, Any] = {}
        for _, full, stored, _ in chain[start:]:
            state = dict(stored) if full else apply_delta(state, stored)
        if state_digest(state) != chain[-1][3]:
            raise DomainError(
                f"checkpoint {cut.checkpoints_below} of run {cut.run_id} does not rebuild to "
                "its digest"
            )
        out[cut.run_id] = state
    return out


def _prune_batch(cuts: list[_Cut]) -> dict[str, int]:
    """One transaction: the events and checkpoints below each cut, the first kept checkpoint
    made a keyframe first (rebuilt and verified against its digest before anything goes)."""
    counts = {"events": 0, "checkpoints": 0, "compacted": 0}
    with transaction.atomic():
        terminal = {
            str(r)
            for r in Run.objects.unscoped()
            .select_for_update()
            .filter(id__in=sorted(c.run_id for c in cuts), status__in=TERMINAL)
            .order_by("id")
            .values_list("id", flat=True)
        }
        cuts = [c for c in cuts if c.run_id in terminal]
        whole = _whole_at_cut(cuts)
        to_fold = [c for c in cuts if c.checkpoints_below > 1 and c.run_id not in whole]
        states = _rebuild_many(to_fold)
        counts["compacted"] = len(to_fold)
        rows: list[tuple[_Cut, str | None]] = [
            (c, json.dumps(states[c.run_id]) if c.run_id in states else None) for c in cuts
        ]
        if not rows:
            return counts
        if _pg():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT events, checkpoints FROM retention_prune_runs("
                    "%s::uuid[], %s::int[], %s::int[], %s::jsonb[])",
                    [
                        [c.run_id for c, _ in rows],
                        [c.events_below for c, _ in rows],
                        [c.checkpoints_below for c, _ in rows],
                        [k for _, k in rows],
                    ],
                )
                events, checkpoints = cursor.fetchone()
            counts["events"] += events
            counts["checkpoints"] += checkpoints
            return counts
        for cut, keyframe in rows:
            if keyframe is not None:
                Checkpoint.objects.filter(run_id=cut.run_id, seq=cut.checkpoints_below).update(
                    full=True, state=json.loads(keyframe)
                )
            events = RunEvent.objects.filter(run_id=cut.run_id, seq__lt=cut.events_below)
            counts["events"] += events._raw_delete(events.db)
            checkpoints = Checkpoint.objects.filter(
                run_id=cut.run_id, seq__lt=cut.checkpoints_below
            )
            counts["checkpoints"] += checkpoints._raw_delete(checkpoints.db)
    return counts


def retention_apply(
    *,
    policy: RetentionPolicy,
    trigger: str,
    actor: str = "retention",
    now: datetime | None = None,
    budget_seconds: float | None = None,
) -> Report:
    """Apply ``policy`` once: plan, then delete in batches until done or ``budget_seconds`` (of
    deleting, after the plan) are spent.
    Writes a :class:`RetentionPass` row and an audit event with what it removed."""
    started = timezone.now()
    now = now or started
    plan, graph = retention_plan(policy=policy, now=now)
    # The budget bounds the deleting, not the planning (a few queries over the project's ids):
    # a pass always gets its batches' worth of work done, however large the project.
    budget = _Budget(budget_seconds)
    report = Report(project=str(policy.project_id), dry_run=False, protected=dict(plan.protected))
    counts: dict[str, int] = {}

    def add(part: dict[str, int]) -> None:
        for kind, n in part.items():
            counts[kind] = counts.get(kind, 0) + n

    run_size = int(_setting("RETENTION_BATCH_RUNS", 200))
    session_size = int(_setting("RETENTION_BATCH_SESSIONS", 500))
    parent_of = {node.id: node.parent for node in graph.runs}
    for batch, families in _family_batches(plan.runs, parent_of, run_size):
        if budget.spent:
            report.complete = False
            break
        try:
            part, dropped = _delete_run_batch(batch, families)
        except (IntegrityError, DatabaseError) as exc:
            report.failures.append(f"runs: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        add(part)
        if dropped:
            report.protected["run_changed_meanwhile"] = (
                report.protected.get("run_changed_meanwhile", 0) + dropped
            )
    if report.complete:
        for batch in _chunks(plan.sessions, session_size):
            if budget.spent:
                report.complete = False
                break
            try:
                add(_delete_session_batch(batch))
            except (IntegrityError, DatabaseError) as exc:
                report.failures.append(f"sessions: {type(exc).__name__}: {str(exc)[:200]}")
    if report.complete and plan.prunable_runs:
        limits = policy_of(policy)
        for batch in _chunks(plan.prunable_runs, run_size):
            if budget.spent:
                report.complete = False
                break
            cuts = _prune_cuts(batch, limits, now)
            if not cuts:
                continue
            try:
                part = _prune_batch(cuts)
            except (DomainError, IntegrityError, DatabaseError) as exc:
                report.failures.append(f"checkpoints: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            report.compacted += part.pop("compacted")
            add(part)
    if report.complete and policy.artifacts_grace_seconds is not None and not budget.spent:
        try:
            removed, size = _sweep_artifacts(policy, now, budget)
            counts["artifacts"] = removed
            report.removed["artifacts"] = {"count": removed, "bytes": size}
        except DomainError as exc:
            report.failures.append(f"artifacts: {exc}")
    for kind, n in counts.items():
        report.removed.setdefault(kind, {"count": n, "bytes": 0})
    finished = timezone.now()
    removed_counts = {k: v["count"] for k, v in report.removed.items() if v["count"]}
    RetentionPass.objects.create(
        tenant_id=policy.tenant_id,
        project_id=policy.project_id,
        policy=policy,
        trigger=trigger,
        actor=actor[:200],
        started_at=started,
        finished_at=finished,
        removed={**removed_counts, "compacted_checkpoints": report.compacted},
        protected=report.protected,
        complete=report.complete and not report.failures,
        error="; ".join(report.failures)[:500],
    )
    audit_record(
        actor=actor,
        action="retention.pass",
        outcome="success" if not report.failures else "failure",
        tenant=policy.project.tenant,
        project=policy.project,
        object_type="retention_policy",
        object_id=str(policy.id),
        details={
            "trigger": trigger,
            "removed": removed_counts,
            "compacted_checkpoints": report.compacted,
            "complete": report.complete,
        },
    )
    RetentionPolicy.objects.unscoped().filter(id=policy.id).update(
        last_pass_at=finished,
        next_pass_at=finished
        + (CONTINUE_AFTER if not report.complete else timedelta(seconds=policy.interval_seconds)),
    )
    return report


def _family_batches(
    order: list[str], parent_of: dict[str, str | None], size: int
) -> Iterator[tuple[list[str], dict[str, list[str]]]]:
    """``order`` (whole families, children first) cut into batches of about ``size`` runs that
    never split a family; each with its families (root -> members)."""
    members = set(order)

    def root(run_id: str) -> str:
        while (parent := parent_of.get(run_id)) is not None and parent in members:
            run_id = parent
        return run_id

    batch: list[str] = []
    families: dict[str, list[str]] = {}
    current_root: str | None = None
    for run_id in order:
        family = root(run_id)
        if family != current_root and len(batch) >= size:
            yield batch, families
            batch, families = [], {}
        current_root = family
        batch.append(run_id)
        families.setdefault(family, []).append(run_id)
    if batch:
        yield batch, families


# --- Artifacts ----------------------------------------------------------------------------------


def _tenant_grace(policy: RetentionPolicy) -> timedelta:
    """The longest artifact grace of the tenant's enabled policies (artifacts are stored per
    tenant, shared by its projects: the most careful project decides)."""
    graces = (
        RetentionPolicy.objects.unscoped()
        .filter(tenant_id=policy.tenant_id, enabled=True, artifacts_grace_seconds__isnull=False)
        .values_list("artifacts_grace_seconds", flat=True)
    )
    seconds = max(
        [
            *(g for g in graces if g is not None),
            policy.artifacts_grace_seconds or 0,
            MIN_ARTIFACT_GRACE_SECONDS,
        ]
    )
    return timedelta(seconds=seconds)


def _stored_artifacts(tenant_id: uuid.UUID) -> Iterator[tuple[str, str]]:
    """``(digest, key)`` of every artifact object the tenant has in the store."""
    root = f"{artifacts.PREFIX}/{tenant_id}"
    try:
        prefixes, _ = default_storage.listdir(root)
    except FileNotFoundError:
        return
    for prefix in sorted(prefixes):
        _, files = default_storage.listdir(f"{root}/{prefix}")
        for name in sorted(files):
            if len(name) == 64 and name.startswith(prefix):
                yield name, f"{root}/{prefix}/{name}"


def _mentioning_rows(tenant_id: uuid.UUID) -> Iterable[tuple[models.QuerySet[Any], str]]:
    """Every JSON column of the tenant's rows that may hold an artifact reference."""
    yield Run.objects.unscoped().filter(tenant_id=tenant_id), "input"
    yield Run.objects.unscoped().filter(tenant_id=tenant_id), "state"
    yield Run.objects.unscoped().filter(tenant_id=tenant_id), "output"
    yield Checkpoint.objects.filter(run__tenant_id=tenant_id), "state"
    yield Chunk.objects.unscoped().filter(tenant_id=tenant_id), "content"
    yield EffectRecord.objects.unscoped().filter(tenant_id=tenant_id), "request"
    yield EffectRecord.objects.unscoped().filter(tenant_id=tenant_id), "result"
    yield Interrupt.objects.unscoped().filter(tenant_id=tenant_id), "request"
    yield Interrupt.objects.unscoped().filter(tenant_id=tenant_id), "response"


def _referenced(tenant_id: uuid.UUID, candidates: set[str]) -> set[str]:
    """The candidates that some row of the tenant mentions (conservatively: the digest's text
    anywhere in a JSON value that mentions an artifact at all)."""
    found: set[str] = set()
    for queryset, column in _mentioning_rows(tenant_id):
        texts = (
            queryset.annotate(_text=Cast(column, models.TextField()))
            .filter(_text__contains="artifact")
            .values_list("_text", flat=True)
        )
        for text in texts.iterator(chunk_size=500):
            if not text:
                continue
            found |= {d for d in candidates - found if d in text}
            if found == candidates:
                return found
    return found


def _aware(moment: datetime) -> datetime:
    if timezone.is_naive(moment):
        return timezone.make_aware(moment, timezone.get_current_timezone())
    return moment


def _unreferenced_artifacts(
    tenant_id: uuid.UUID, grace: timedelta, now: datetime
) -> list[tuple[str, int]]:
    """``(key, size)`` of the tenant's artifacts older than ``grace`` that no row mentions."""
    old: dict[str, str] = {}
    for digest, key in _stored_artifacts(tenant_id):
        try:
            modified = default_storage.get_modified_time(key)
        except FileNotFoundError:
            continue
        if _aware(modified) < now - grace:
            old[digest] = key
    if not old:
        return []
    kept = _referenced(tenant_id, set(old))
    return [(key, default_storage.size(key)) for d, key in sorted(old.items()) if d not in kept]


def _sweep_artifacts(policy: RetentionPolicy, now: datetime, budget: _Budget) -> tuple[int, int]:
    """Delete the tenant's artifacts no row mentions and older than the grace; returns the
    objects and bytes removed."""
    removed = size = 0
    grace = _tenant_grace(policy)
    try:
        doomed = _unreferenced_artifacts(policy.tenant_id, grace, now)
    except OSError as exc:
        raise DomainError(f"the artifact store could not be listed: {exc}") from exc
    for key, bytes_ in doomed:
        if budget.spent:
            break
        try:
            # Looked at again just before it goes: a put of the same bytes since the listing
            # refreshed its time (openrath_project.artifacts._touch) for a reference that may
            # not be committed yet.
            if _aware(default_storage.get_modified_time(key)) >= now - grace:
                continue
            default_storage.delete(key)
        except OSError as exc:
            logger.warning("retention could not delete artifact %s: %s", key, exc)
            continue
        removed += 1
        size += bytes_
    return removed, size


# --- The reconciler's hook ----------------------------------------------------------------------


@dataclass
class Applied:
    """What :func:`retention_due` did in one reconciler tick."""

    passes: int = 0
    removed: int = 0


def retention_due(*, now: datetime | None = None, limit: int = 5) -> Applied:
    """Apply the policies whose pass is due, within ``RETENTION_TICK_SECONDS`` (default 5) in
    all. Each policy is claimed with a conditional UPDATE of its ``next_pass_at`` (so two
    reconcilers never apply the same one at once); no lock is held across the work."""
    now = now or timezone.now()
    result = Applied()
    budget = _Budget(_setting("RETENTION_TICK_SECONDS", 5.0))
    due = list(
        RetentionPolicy.objects.unscoped()
        .filter(enabled=True, next_pass_at__lte=now)
        .order_by("next_pass_at")
        .values_list("id", "next_pass_at")[:limit]
    )
    for policy_id, due_at in due:
        if budget.spent:
            break
        claimed = (
            RetentionPolicy.objects.unscoped()
            .filter(id=policy_id, enabled=True, next_pass_at=due_at)
            .update(next_pass_at=now + timedelta(seconds=CLAIM_SECONDS))
        )
        if not claimed:
            continue  # another reconciler took it
        policy = (
            RetentionPolicy.objects.unscoped().select_related("project__tenant").get(id=policy_id)
        )
        remaining = (
            None if budget.deadline is None else max(budget.deadline - time.monotonic(), 0.1)
        )
        try:
            report = retention_apply(
                policy=policy, trigger="reconciler", now=now, budget_seconds=remaining
            )
        except (DomainError, DatabaseError) as exc:
            logger.warning("retention pass of policy %s failed: %s", policy_id, exc)
            continue
        result.passes += 1
        result.removed += sum(v["count"] for v in report.removed.values())
    return result


__all__ = [
    "Applied",
    "Report",
    "policy_create",
    "policy_delete",
    "policy_update",
    "retention_apply",
    "retention_due",
    "retention_dry_run",
    "retention_plan",
]
