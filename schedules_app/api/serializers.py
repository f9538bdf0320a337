"""Input and output shapes of the schedules API."""

from __future__ import annotations

from rest_framework import serializers

from openrath_project.api.serializers import (
    OutputModelSerializer,
    ProjectRefField,
    StrictInputSerializer,
)
from schedules_app.models import FIRE_OUTCOMES, Schedule, ScheduleFire
from schedules_app.timing import (
    CATCHUP_POLICIES,
    KINDS,
    MAX_CATCHUP_LIMIT,
    MAX_CRON_LENGTH,
    OVERLAP_POLICIES,
)


class ScheduleOut(OutputModelSerializer):
    """A schedule. ``next_fire_at`` is the next tick it fires (while not paused)."""

    project = serializers.UUIDField(source="project_id")
    input = serializers.JSONField()
    interval_seconds = serializers.IntegerField(allow_null=True)
    catchup_limit = serializers.IntegerField(min_value=1, max_value=MAX_CATCHUP_LIMIT)
    priority = serializers.IntegerField(min_value=-100, max_value=100)
    missed_ticks = serializers.IntegerField(min_value=0)

    class Meta:
        model = Schedule
        fields = (
            "id",
            "project",
            "name",
            "workflow",
            "input",
            "user_message",
            "priority",
            "kind",
            "cron",
            "interval_seconds",
            "timezone",
            "start_at",
            "catchup",
            "catchup_limit",
            "overlap",
            "paused",
            "next_fire_at",
            "last_fired_at",
            "missed_ticks",
            "created_by",
            "created_at",
            "updated_at",
        )


class _ScheduleFields(StrictInputSerializer):
    name = serializers.CharField(required=False, max_length=200, allow_blank=True)
    workflow = serializers.CharField(max_length=200)
    input = serializers.DictField(
        required=False, help_text="The run's initial state (checked against the input_schema)."
    )
    user_message = serializers.CharField(
        required=False, max_length=200_000, allow_blank=True, help_text="Starts each run's session."
    )
    priority = serializers.IntegerField(required=False, min_value=-100, max_value=100)
    kind = serializers.ChoiceField(choices=KINDS)
    cron = serializers.CharField(
        required=False,
        max_length=MAX_CRON_LENGTH,
        allow_blank=True,
        help_text="Five fields (minute hour day-of-month month day-of-week), for kind cron.",
    )
    interval_seconds = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, help_text="For kind interval (>= 10)."
    )
    timezone = serializers.CharField(
        required=False, max_length=64, help_text="An IANA zone the cron expression is read in."
    )
    start_at = serializers.DateTimeField(
        required=False, help_text="No tick before this instant; an interval's anchor."
    )
    catchup = serializers.ChoiceField(choices=CATCHUP_POLICIES, required=False)
    catchup_limit = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_CATCHUP_LIMIT
    )
    overlap = serializers.ChoiceField(choices=OVERLAP_POLICIES, required=False)


class ScheduleCreateIn(_ScheduleFields):
    project = ProjectRefField()
    paused = serializers.BooleanField(required=False, default=False)


class ScheduleUpdateIn(_ScheduleFields):
    """The fields to change (read with ``partial=True``: each optional); the project is fixed
    at creation."""


class NextQuery(serializers.Serializer):
    count = serializers.IntegerField(min_value=1, max_value=100, default=5)


class NextOut(serializers.Serializer):
    """The schedule's next fire times (UTC), and whether it is paused (then they are the times
    it would fire if resumed now)."""

    paused = serializers.BooleanField()
    timezone = serializers.CharField()
    times = serializers.ListField(child=serializers.DateTimeField())


class FireQuery(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=200, default=50)


class FireOut(OutputModelSerializer):
    """One tick of the schedule and what it did."""

    run = serializers.UUIDField(source="run_id", allow_null=True)
    outcome = serializers.ChoiceField(choices=FIRE_OUTCOMES)
    detail = serializers.JSONField()

    class Meta:
        model = ScheduleFire
        fields = ("id", "tick", "fired_at", "outcome", "run", "detail")
