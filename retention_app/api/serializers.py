"""Input and output shapes of the retention API."""

from __future__ import annotations

from rest_framework import serializers

from openrath_project.api.serializers import (
    OutputModelSerializer,
    ProjectRefField,
    StrictInputSerializer,
)
from retention_app.models import PASS_TRIGGERS, RetentionPass, RetentionPolicy
from retention_app.services import LIMIT_FIELDS, MIN_ARTIFACT_GRACE_SECONDS, MIN_INTERVAL_SECONDS

_LIMITS = LIMIT_FIELDS


class PolicyOut(OutputModelSerializer):
    """A project's retention policy. A limit that is null keeps everything of its kind."""

    project = serializers.UUIDField(source="project_id")

    class Meta:
        model = RetentionPolicy
        fields = (
            "id",
            "project",
            "enabled",
            *_LIMITS,
            "interval_seconds",
            "next_pass_at",
            "last_pass_at",
            "created_by",
            "created_at",
            "updated_at",
        )


def _limit(help_text: str, *, min_value: int = 0) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=min_value, help_text=help_text
    )


class _PolicyFields(StrictInputSerializer):
    enabled = serializers.BooleanField(required=False)
    runs_max_age_seconds = _limit("Remove terminal runs finished longer ago than this.")
    runs_keep_last = _limit("Keep only the newest this many top-level runs.")
    sessions_max_age_seconds = _limit("Remove sessions unchanged for longer than this.")
    sessions_keep_last = _limit("Keep only the newest this many sessions.")
    events_max_age_seconds = _limit("Remove older events of kept terminal runs.")
    events_keep_last = _limit("Keep this many newest events per kept terminal run.", min_value=1)
    checkpoints_max_age_seconds = _limit("Remove older checkpoints of kept terminal runs.")
    checkpoints_keep_last = _limit(
        "Keep this many newest checkpoints per kept terminal run.", min_value=1
    )
    artifacts_grace_seconds = _limit(
        "Delete unreferenced artifacts older than this (null: never sweep artifacts).",
        min_value=MIN_ARTIFACT_GRACE_SECONDS,
    )
    interval_seconds = serializers.IntegerField(
        required=False, min_value=MIN_INTERVAL_SECONDS, help_text="Seconds between passes."
    )


class PolicyCreateIn(_PolicyFields):
    project = ProjectRefField()


class PolicyUpdateIn(_PolicyFields):
    """The fields to change (each optional); the project is fixed at creation."""


class Measured(serializers.Serializer):
    count = serializers.IntegerField(min_value=0)
    bytes = serializers.IntegerField(
        min_value=0,
        help_text="pg_column_size of the rows on PostgreSQL; payload lengths on SQLite.",
    )


class ReportOut(serializers.Serializer):
    """What a pass removed (or, for a dry run, would remove), by kind: runs, events,
    checkpoints, effects, interrupts, run_forks, sessions, chunks, lineage_edges, artifacts."""

    project = serializers.UUIDField()
    dry_run = serializers.BooleanField()
    removed = serializers.DictField(child=Measured())
    compacted_checkpoints = serializers.IntegerField(
        help_text="Checkpoints rewritten whole because the ones before them go."
    )
    protected = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Objects the limits expired that the lineage rules keep, by reason.",
    )
    sample = serializers.DictField(
        child=serializers.ListField(child=serializers.UUIDField()),
        help_text="Up to 50 ids of the runs and sessions that go.",
    )
    complete = serializers.BooleanField(help_text="False: the budget ran out; the rest is next.")
    failures = serializers.ListField(
        child=serializers.CharField(),
        help_text="Batches that failed (they roll back whole; the next pass plans again).",
    )


class PassOut(OutputModelSerializer):
    """One applied pass."""

    trigger = serializers.ChoiceField(choices=PASS_TRIGGERS)
    removed = serializers.DictField(child=serializers.IntegerField())
    protected = serializers.DictField(child=serializers.IntegerField())

    class Meta:
        model = RetentionPass
        fields = (
            "id",
            "trigger",
            "actor",
            "started_at",
            "finished_at",
            "removed",
            "protected",
            "complete",
            "error",
        )


class PassQuery(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=200, default=50)
