"""Input and output shapes of the runs and workflows API (DESIGN section 10)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from openrath_project.api.serializers import (
    OutputModelSerializer,
    ProjectRefField,
    StrictInputSerializer,
)
from runs_app.models import (
    DECISIONS,
    INPUT_POLICIES,
    INTERRUPT_KINDS,
    INTERRUPT_STATES,
    Interrupt,
    Run,
    RunEvent,
    RunFork,
)
from runs_app.state_delta import StateInvalid, check_json_state
from runs_app.transitions import STATUSES
from sessions_app.chunk_rules import MAX_SEQ, MAX_SESSION_COST_USD, MAX_SESSION_TOKENS


class ForkedFromOut(serializers.Serializer):
    """The run-to-run lineage edge of a forked run (``RunFork``)."""

    run = serializers.UUIDField(help_text="The parent run.")
    checkpoint = serializers.IntegerField(help_text="The parent's checkpoint (branch point).")
    by = serializers.CharField()
    reason = serializers.CharField()
    at = serializers.DateTimeField()
    plan_mode = serializers.CharField(help_text="pinned or current (the plan the fork pins).")


def forked_from_of(run: Run) -> dict[str, Any] | None:
    """The ``forked_from`` block of a run (``None`` unless it was forked from another)."""
    try:
        edge = run.forked_from
    except RunFork.DoesNotExist:
        return None
    return {
        "run": str(edge.parent_id),
        "checkpoint": edge.checkpoint_seq,
        "by": edge.created_by,
        "reason": edge.reason,
        "at": serializers.DateTimeField().to_representation(edge.created_at),
        "plan_mode": edge.plan_mode,
    }


class RunOut(OutputModelSerializer):
    """A run. ``state`` is the workflow's data (as of checkpoint ``state_checkpoint`` in
    lists; the latest on ``GET /runs/{id}/``)."""

    project = serializers.UUIDField(source="project_id")
    session = serializers.UUIDField(source="session_id", allow_null=True)
    # "parent"/"data" shadow serializer attributes in the stubs; DRF moves fields aside.
    parent = serializers.UUIDField(source="parent_id", allow_null=True)  # type: ignore[assignment]
    plan = serializers.CharField(source="plan_id")
    state = serializers.JSONField()
    output = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    next_nodes = serializers.ListField(child=serializers.CharField())
    state_checkpoint = serializers.IntegerField(source="state_seq")
    checkpoints = serializers.IntegerField(source="checkpoint_seq")
    events = serializers.IntegerField(source="event_seq")
    priority = serializers.IntegerField(min_value=-100, max_value=100)
    attempt = serializers.IntegerField(min_value=1)
    forked_from = serializers.SerializerMethodField()
    #: ``replay``: a regression check of ``replay_of`` (``runs_app.replay``); else ``run``.
    kind = serializers.ChoiceField(choices=[("run", "run"), ("replay", "replay")])
    replay_of = serializers.UUIDField(source="replay_of_id", allow_null=True)
    input_session = serializers.UUIDField(
        source="input_session_id",
        allow_null=True,
        help_text="The session the run was submitted on (null: none).",
    )
    input_policy = serializers.ChoiceField(
        choices=[("", ""), *((p, p) for p in INPUT_POLICIES)],
        help_text='Its concurrent-input policy ("" without an input session).',
    )
    after_run = serializers.UUIDField(
        source="after_run_id",
        allow_null=True,
        help_text="The run it waited (or waits) for: queued with a null session until it ends.",
    )
    superseded_by = serializers.UUIDField(
        source="superseded_by_id",
        allow_null=True,
        help_text="The run whose submission interrupted, rolled back or replaced this one.",
    )
    stop_requested_at = serializers.DateTimeField(
        allow_null=True, help_text="When an interrupt asked it to stop at its next step boundary."
    )

    @extend_schema_field(ForkedFromOut(allow_null=True))
    def get_forked_from(self, obj: Run) -> dict[str, Any] | None:
        return forked_from_of(obj)

    class Meta:
        model = Run
        fields = (
            "id",
            "workflow",
            "project",
            "status",
            "state",
            "output",
            "error",
            "session",
            "parent",
            "priority",
            "deadline",
            "attempt",
            "created_at",
            "started_at",
            "finished_at",
            "updated_at",
            "plan",
            "branch",
            "next_nodes",
            "review_reason",
            "created_by",
            "state_checkpoint",
            "checkpoints",
            "events",
            "forked_from",
            "kind",
            "replay_of",
            "input_session",
            "input_policy",
            "after_run",
            "superseded_by",
            "stop_requested_at",
        )


class RunCreateIn(StrictInputSerializer):
    workflow = serializers.CharField(max_length=200)
    project = ProjectRefField()
    state = serializers.DictField(required=False, default=dict)
    session = serializers.UUIDField(
        required=False, help_text="Start from this session (the run works on a fork)."
    )
    user_message = serializers.CharField(required=False, max_length=200_000)
    input_policy = serializers.ChoiceField(
        choices=list(INPUT_POLICIES),
        required=False,
        help_text=(
            "When the session has an active run: reject (409 session_busy), enqueue (start "
            "after it), interrupt (stop it at its next step boundary, then start from where "
            "it stopped) or rollback (cancel it, start from before it). Default: the "
            "workflow's, else reject. See docs/concurrent-input.md."
        ),
    )
    priority = serializers.IntegerField(required=False, default=0, min_value=-100, max_value=100)
    deadline = serializers.DateTimeField(
        required=False,
        help_text="An ISO 8601 instant in the future (at most 9999-12-31T23:59:59Z).",
    )
    token_budget = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_SESSION_TOKENS,
        help_text="Most tokens the run may spend (1 to a session's most).",
    )
    cost_budget_usd = serializers.DecimalField(
        required=False,
        max_digits=20,
        decimal_places=8,
        min_value=Decimal(0),
        max_value=Decimal(MAX_SESSION_COST_USD),
    )

    def validate_state(self, value: dict[str, Any]) -> dict[str, Any]:
        try:
            return check_json_state(value)
        except StateInvalid as exc:
            raise serializers.ValidationError(exc.details["state"]) from exc

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "session" in attrs and "user_message" in attrs:
            raise serializers.ValidationError(
                {"user_message": ["give session or user_message, not both"]}
            )
        return attrs


class RunEventOut(OutputModelSerializer):
    data = serializers.JSONField()  # type: ignore[assignment]

    class Meta:
        model = RunEvent
        fields = ("seq", "type", "step", "data", "created_at")


class CheckpointOut(serializers.Serializer):
    seq = serializers.IntegerField(source="checkpoint.seq")
    step = serializers.CharField(source="checkpoint.step")
    state = serializers.JSONField()
    next_nodes = serializers.JSONField(source="checkpoint.next_nodes")
    session = serializers.SerializerMethodField()
    fencing_token = serializers.IntegerField(source="checkpoint.fencing_token")
    attempt = serializers.IntegerField(source="checkpoint.attempt")
    stored_in_full = serializers.BooleanField(source="checkpoint.full")
    state_digest = serializers.CharField(source="checkpoint.state_digest")
    created_at = serializers.DateTimeField(source="checkpoint.created_at")

    def get_session(self, obj: dict[str, Any]) -> dict[str, Any]:
        checkpoint = obj["checkpoint"]
        return {
            "id": str(checkpoint.session_id) if checkpoint.session_id else None,
            "length": checkpoint.session_len,
        }


class CancelIn(StrictInputSerializer):
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class ResumeIn(StrictInputSerializer):
    reason = serializers.CharField(max_length=500)
    accept_plan = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        required=False,
        help_text="After plan drift: the hash of the workflow's current plan, to re-pin the run.",
    )


class EventQuery(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, max_value=MAX_SEQ, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)


class WorkflowOut(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    version = serializers.CharField()
    plan = serializers.CharField(help_text="The plan's hash.")
    entry = serializers.CharField()
    nodes = serializers.IntegerField()


@extend_schema_serializer(many=False)
class WorkflowListOut(serializers.Serializer):
    """The registered workflows (a short list from the code: one page, ``next`` is null)."""

    results = WorkflowOut(many=True)
    next = serializers.CharField(allow_null=True)


class WorkflowDetailOut(WorkflowOut):
    graph = serializers.JSONField()


STATUS_CHOICES = [(s, s) for s in STATUSES]


class InterruptOut(OutputModelSerializer):
    run = serializers.UUIDField(source="run_id")
    project = serializers.UUIDField(source="project_id")
    request = serializers.JSONField()
    schema = serializers.JSONField(allow_null=True)
    response = serializers.JSONField(allow_null=True)
    default = serializers.JSONField(allow_null=True)

    class Meta:
        model = Interrupt
        fields = (
            "id",
            "run",
            "project",
            "step",
            "kind",
            "title",
            "request",
            "request_digest",
            "schema",
            "status",
            "decision",
            "response",
            "reason",
            "resolved_by",
            "resolved_at",
            "expires_at",
            "default",
            "created_at",
        )


class InterruptResolveIn(StrictInputSerializer):
    decision = serializers.ChoiceField(choices=DECISIONS)
    response = serializers.JSONField(required=False, allow_null=True)
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
    request_digest = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        help_text="The digest of the request the operator saw (409 when it differs).",
    )


INTERRUPT_STATUS_CHOICES = [(s, s) for s in INTERRUPT_STATES]
INTERRUPT_KIND_CHOICES = [(k, k) for k in INTERRUPT_KINDS]


def run_status(run: Run) -> dict[str, Any]:
    """What the run streams (WebSocket and Server-Sent Events) say of a run after an event that
    changed its status: its id, status, next nodes and error."""
    return {
        "id": str(run.id),
        "status": run.status,
        "next_nodes": list(run.next_nodes or []),
        "error": run.error,
    }
