"""Input and output shapes of the tenancy API."""

from __future__ import annotations

from rest_framework import serializers

from openrath_project.api.serializers import OutputModelSerializer, StrictInputSerializer
from openrath_project.tenancy.models import AuditEvent, Project


class ProjectOut(OutputModelSerializer):
    #: At most this many of the project's runs execute at once (null: no limit); operators
    #: set it (admin, ``manage.py queue_limits``), the API only shows it.
    max_running_runs = serializers.IntegerField(read_only=True, allow_null=True, min_value=0)

    class Meta:
        model = Project
        fields: tuple[str, ...] = ("id", "slug", "name", "max_running_runs", "created_at")


class ProjectUsageOut(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    cost_usd = serializers.FloatField()
    sessions = serializers.IntegerField()


class ProjectDetailOut(ProjectOut):
    """A project with what its sessions spent (each token counted once)."""

    usage = ProjectUsageOut()

    class Meta(ProjectOut.Meta):
        fields = (*ProjectOut.Meta.fields, "usage")


class ProjectIn(StrictInputSerializer):
    slug = serializers.RegexField(
        r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$",
        max_length=63,
        help_text="Lowercase letters, digits and '-', unique in the tenant.",
    )
    name = serializers.CharField(max_length=200, required=False, allow_blank=False)


class AuditEventOut(OutputModelSerializer):
    project = serializers.SerializerMethodField()
    # Declared, so the OpenAPI document does not depend on the database's integer ranges.
    status_code = serializers.IntegerField(allow_null=True, min_value=100, max_value=599)
    id = serializers.IntegerField(min_value=1)

    class Meta:
        model = AuditEvent
        fields = (
            "id",
            "created_at",
            "actor",
            "action",
            "object_type",
            "object_id",
            "outcome",
            "status_code",
            "request_id",
            "project",
            "details",
        )

    def get_project(self, obj: AuditEvent) -> str | None:
        return str(obj.project_id) if obj.project_id else None
