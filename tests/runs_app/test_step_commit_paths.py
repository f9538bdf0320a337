"""One step-commit path: the composed PostgreSQL statements and the portable ORM fallback write
the same rows.

The same workflows run once down each path on the same PostgreSQL database (the fallback forced
by the one switch that picks a path, ``runs_app.services.composed.composed_sql``); every row
they leave in the run, checkpoint, event, session and chunk tables is compared, with ids, times
and worker names taken out. On SQLite only the fallback exists, and the rest of the suite runs it
there.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db.models import Q

from runs_app import services
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent
from runs_app.services import composed as composed_path
from sessions_app.models import Chunk, LineageEdge, Session
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable
from tests.support import require_postgres

pytestmark = pytest.mark.django_db(transaction=True)

#: Linear steps with chunks, a router, a fan-out whose branches finish and join, and an agent
#: step (model usage on the session) that fails after its write and is retried on a fork.
WORKFLOWS = [
    ("linear", {"who": "ada"}),
    ("routed", {"amount": 3}),
    ("parallel", {}),
    ("agent_step", {}),
]

RUN_FIELDS = (
    "workflow",
    "status",
    "input",
    "state",
    "state_seq",
    "output",
    "error",
    "branch",
    "join_step",
    "next_nodes",
    "attempt",
    "lease_owner",
    "fencing_token",
    "checkpoint_seq",
    "event_seq",
    "session_len",
    "fanout",
)
CHECKPOINT_FIELDS = (
    "seq",
    "step",
    "next_nodes",
    "full",
    "state",
    "state_digest",
    "session_len",
    "fencing_token",
    "attempt",
)
SESSION_FIELDS = (
    "base_len",
    "own_len",
    "usage_prompt_tokens",
    "usage_completion_tokens",
    "usage_total_tokens",
    "usage_cost_usd",
)
#: Event data keys holding a wall-clock time.
TIMES = ("wake_at",)
CHUNK_FIELDS = ("seq", "role", "kind", "content", "agent", "workflow", "step", "trust", "branch")


class Names:
    """Stable names for the ids a run creates (its runs, sessions and interrupts, in order)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, value: Any) -> str | None:
        if value is None:
            return None
        key = str(value)
        if key not in self.names:
            self.names[key] = f"#{len(self.names)}"
        return self.names[key]

    def scrub(self, value: Any) -> Any:
        """``value`` with every id this run made replaced by its name (in nested JSON too)."""
        if isinstance(value, dict):
            return {
                k: "<time>" if k in TIMES else self.scrub(v)
                for k, v in value.items()
                if k != "worker"
            }
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        if isinstance(value, str) and value in self.names:
            return self.names[value]
        return value


def _snapshot(root: Run) -> dict[str, Any]:
    """Every row the run and its branches left, with ids named in a stable order."""
    names = Names()
    runs = [root]
    index = 0
    while index < len(runs):  # breadth first; branches in the order the fan-out created them
        runs += list(Run.objects.filter(parent=runs[index]).order_by("branch", "created_at"))
        index += 1
    for run in runs:
        names(run.id)
    session_ids = [run.session_id for run in runs]
    edges = LineageEdge.objects.filter(Q(parent_id__in=session_ids) | Q(child_id__in=session_ids))
    for parent_id, child_id in edges.order_by("created_at").values_list("parent_id", "child_id"):
        session_ids += [parent_id, child_id]
    for session_id in session_ids:
        names(session_id)
    for interrupt_id in Interrupt.objects.filter(run__in=runs).order_by("id").values_list("id"):
        names(interrupt_id[0])
    snapshot: dict[str, Any] = {"runs": [], "sessions": []}
    for run in runs:
        row = {field: names.scrub(getattr(run, field)) for field in RUN_FIELDS}
        row["lease_expires_at"] = run.lease_expires_at is not None
        row["finished"] = run.finished_at is not None
        row["session"] = names(run.session_id)
        row["parent"] = names(run.parent_id)
        row["checkpoints"] = [
            {
                **{f: names.scrub(getattr(c, f)) for f in CHECKPOINT_FIELDS},
                "session": names(c.session_id),
            }
            for c in Checkpoint.objects.filter(run=run).order_by("seq")
        ]
        row["events"] = [
            (e.seq, e.type, e.step, names.scrub(e.data))
            for e in RunEvent.objects.filter(run=run).order_by("seq")
        ]
        snapshot["runs"].append(row)
    for session_id in dict.fromkeys(session_ids):
        session = Session.objects.get(id=session_id)
        row = {field: getattr(session, field) for field in SESSION_FIELDS}
        row["name"] = names(session.id)
        row["base"] = names(session.base_id)
        row["writer"] = names(session.writer_run_id)
        row["writer_token"] = session.writer_token
        row["chunks"] = [
            {
                **{f: names.scrub(getattr(c, f)) for f in CHUNK_FIELDS},
                "usage": c.usage,
                "run": names(c.run_id),
            }
            for c in Chunk.objects.filter(session_id=session.id).order_by("seq")
        ]
        snapshot["sessions"].append(row)
    return snapshot


def _run(registry, project, name: str, state: dict[str, Any]) -> dict[str, Any]:
    durable.CALLS.clear()
    durable.APPENDED.clear()
    run, created = services.run_create(
        project=project,
        workflow=registry.get(name),
        state=state,
        user_message=f"start {name}",
        idempotency_key=f"{name}-{uuid.uuid4()}",
    )
    assert created
    done = drive(registry, run.id, until=("succeeded", "failed", "needs_review"))
    return _snapshot(done)


@pytest.mark.parametrize(("name", "state"), WORKFLOWS, ids=[w[0] for w in WORKFLOWS])
def test_both_paths_write_the_same_rows(registry, project, monkeypatch, name, state):
    require_postgres()
    composed = _run(registry, project, name, state)
    monkeypatch.setattr(composed_path, "composed_sql", lambda: False)
    portable = _run(registry, project, name, state)

    assert composed["runs"][0]["status"] == "succeeded", composed["runs"][0]
    assert composed["runs"][0]["checkpoints"], "the workflow committed no step"
    assert composed == portable


def _decided_and_cancelled(registry, project) -> dict[str, Any]:
    """Run transitions outside a step commit: a run waits, is decided and finishes; another is
    cancelled while queued."""
    from runs_app.interrupts import interrupt_resolve

    run, _ = services.run_create(
        project=project,
        workflow=registry.get("approval"),
        state={"report": "Q3"},
        idempotency_key=f"approval-{uuid.uuid4()}",
    )
    assert drive(registry, run.id).status == "waiting"
    interrupt_resolve(  # rejected: no effect (whose key is the run's own) is published
        interrupt=Interrupt.objects.get(run_id=run.id),
        decision="reject",
        reason="not yet",
        actor="user:a",
    )
    done = drive(registry, run.id, until=("succeeded", "failed", "needs_review"))
    other, _ = services.run_create(
        project=project,
        workflow=registry.get("linear"),
        state={},
        idempotency_key=f"cancel-{uuid.uuid4()}",
    )
    cancelled = services.run_cancel(run=other)
    return {"decided": _snapshot(done), "cancelled": _snapshot(cancelled)}


def test_run_transitions_write_the_same_rows_on_both_paths(registry, project, monkeypatch):
    """A transition's event and the run's row are one statement on PostgreSQL and two on the
    portable path (``save_with_event``): the same rows either way."""
    require_postgres()
    composed = _decided_and_cancelled(registry, project)
    monkeypatch.setattr(composed_path, "composed_sql", lambda: False)
    portable = _decided_and_cancelled(registry, project)
    assert composed["decided"]["runs"][0]["status"] == "succeeded"
    assert composed["cancelled"]["runs"][0]["status"] == "cancelled"
    assert composed == portable, _differences(composed, portable)


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def test_a_transition_is_one_statement_after_its_lock(registry, project):
    require_postgres()
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from runs_app.services.eventlog import save_with_event

    run, _ = services.run_create(project=project, workflow=registry.get("linear"), state={})
    with CaptureQueriesContext(connection) as cancelling:
        services.run_cancel(run=run)
    writes = [
        q["sql"]
        for q in cancelling.captured_queries
        if q["sql"].startswith(("UPDATE", "INSERT", "WITH"))
        and ('"runs_app_run"' in q["sql"] or '"runs_app_runevent"' in q["sql"])
    ]
    assert len(writes) == 1, writes
    assert writes[0].startswith('WITH new_event AS (INSERT INTO "runs_app_runevent"')
    assert 'UPDATE "runs_app_run" SET' in writes[0]
    assert _events_of(run) == ["run.created", "run.cancelled"]
    # Outside a transaction it refuses before writing anything (a miss could not be undone)
    with pytest.raises(transaction.TransactionManagementError):
        save_with_event(Run.objects.get(id=run.id), "run.noted", fields=[])
    assert _events_of(run) == ["run.created", "run.cancelled"]
    assert Run.objects.get(id=run.id).event_seq == 2


def _events_of(run) -> list[str]:
    return list(
        RunEvent.objects.filter(run_id=run.id).order_by("seq").values_list("type", flat=True)
    )


def test_the_database_vendor_alone_picks_the_path(registry, project):
    """Inside a caller's transaction (a ``db``-fixture test) PostgreSQL takes the composed
    statement too, under a savepoint, so a refusal leaves the transaction usable."""
    require_postgres()
    from django.db import transaction

    run, _ = services.run_create(project=project, workflow=registry.get("linear"), state={})
    with transaction.atomic():
        assert composed_path.composed_sql()
        claim = services.lease_claim(worker="w", run_id=run.id)
        assert claim is not None
        assert claim.session_length == 0
        stale = services.Claim(run_id=run.id, token=claim.token - 1, worker="old")
        commit = services.StepCommit(
            step="one", state={"a": 1}, previous_state={}, next_nodes=["two"], attempt=1
        )
        with pytest.raises(services.StaleLease):
            services.checkpoint_commit(claim=stale, commit=commit, checkpoint_seq=0)
        assert services.checkpoint_commit(claim=claim, commit=commit, checkpoint_seq=0) == 1
    assert Checkpoint.objects.filter(run=run).count() == 1
    assert Run.objects.get(id=run.id).lease_expires_at is not None


@pytest.mark.parametrize("composed", [True, False], ids=["composed", "portable"])
def test_a_commit_past_the_usage_domain_is_refused_the_same_way(
    registry, project, monkeypatch, composed
):
    """A step whose chunks would carry the session's token total past its domain is the
    documented 400 on both paths, and nothing of the step is written."""
    if composed:
        require_postgres()
    else:
        monkeypatch.setattr(composed_path, "composed_sql", lambda: False)
    from openrath_project.errors import ValidationFailed
    from sessions_app.chunk_rules import MAX_SESSION_TOKENS, make_draft

    run, _ = services.run_create(project=project, workflow=registry.get("linear"), state={})
    claim = services.lease_claim(worker="w", run_id=run.id)
    assert claim is not None
    Session.objects.filter(id=run.session_id).update(usage_total_tokens=MAX_SESSION_TOKENS - 5)
    draft = make_draft(role="assistant", content={"text": "costly"}, usage={"total_tokens": 10})
    commit = services.StepCommit(
        step="one",
        state={"a": 1},
        previous_state={},
        next_nodes=["two"],
        attempt=1,
        chunks=[draft],
    )
    with pytest.raises(ValidationFailed, match="usage"):
        services.checkpoint_commit(claim=claim, commit=commit, checkpoint_seq=0)
    assert not Checkpoint.objects.filter(run=run).exists()
    assert Session.objects.get(id=run.session_id).own_len == 0
    assert Run.objects.get(id=run.id).checkpoint_seq == 0


def test_keyframes_follow_the_bytes_of_deltas_not_a_count():
    """A state is stored whole again once the deltas since the last whole one reach twice its
    size (4 KiB at least), so a state that grows every step costs linear storage."""
    keyframes = services.Keyframes()
    assert keyframes.keyframe_now(10, 100_000)  # a new claim: the first checkpoint is whole
    keyframes.stored(full=True, length=100_000)
    assert not keyframes.keyframe_now(500, 100_000)
    keyframes.stored(full=False, length=60_000)
    assert not keyframes.keyframe_now(139_999, 100_000)
    assert keyframes.keyframe_now(140_000, 100_000)  # 60,000 + 140,000: twice the state
    small = services.Keyframes(delta_bytes=0)
    assert not small.keyframe_now(4_000, 50)  # a small state: up to 4 KiB of deltas
    assert small.keyframe_now(services.KEYFRAME_MIN_BYTES, 50)
    long = services.Keyframes(delta_bytes=0, chain=services.KEYFRAME_MAX_CHAIN)
    assert long.keyframe_now(1, 10**9)  # a chain is never longer than KEYFRAME_MAX_CHAIN

    # A state growing by one 500-byte message a step, over 2,000 steps: whole states cost no
    # more than the deltas do, where one every 32 steps cost ~30x the messages.
    keyframes, state_len, whole, deltas = services.Keyframes(), 100, 0, 0
    for _ in range(2_000):
        state_len += 520
        if keyframes.keyframe_now(540, state_len):
            whole += state_len
            keyframes.stored(full=True, length=state_len)
        else:
            deltas += 540
            keyframes.stored(full=False, length=540)
    assert whole <= 2 * deltas
