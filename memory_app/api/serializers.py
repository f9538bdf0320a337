"""Input and output shapes of the memory API (DESIGN section 10)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory_app.models import MAX_AGENT_CHARS, SCOPES, MemoryEntry
from memory_app.selectors import MAX_RECALL_K
from openrath_project.api.serializers import (
    OutputModelSerializer,
    ProjectRefField,
    StrictInputSerializer,
)
from sessions_app.chunk_rules import TRUST_LABELS

#: Longest recall query, in characters (a longer one is a 413; the service reads at most
#: ``bm25.MAX_QUERY_TERMS`` distinct terms of any query).
MAX_QUERY_CHARS = 4000


class MemoryEntryOut(OutputModelSerializer):
    """A remembered fact. ``trust`` is ``untrusted`` for facts taken from sessions or tools."""

    project = serializers.UUIDField(source="project_id")
    session = serializers.UUIDField(source="session_id", allow_null=True)
    source_session = serializers.UUIDField(source="source_session_id", allow_null=True)
    metadata = serializers.JSONField()

    class Meta:
        model = MemoryEntry
        fields = (
            "id",
            "project",
            "scope",
            "agent",
            "session",
            "text",
            "metadata",
            "trust",
            "fingerprint",
            "source_session",
            "source_seq",
            "created_by",
            "created_at",
            "updated_at",
        )


class MemoryCreateIn(StrictInputSerializer):
    project = ProjectRefField()
    # No max_length here: an over-long text is a 413 from the service, not a 400.
    text = serializers.CharField(help_text="The fact (at most 8000 characters).")
    scope = serializers.ChoiceField(choices=SCOPES, default="project")
    agent = serializers.CharField(
        max_length=MAX_AGENT_CHARS,
        required=False,
        default="",
        allow_blank=True,
        help_text="The agent whose memory this is (required for scope agent).",
    )
    session = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The session whose memory this is (required for scope session).",
    )
    metadata = serializers.DictField(required=False, default=dict)
    trust = serializers.ChoiceField(
        choices=TRUST_LABELS,
        default="trusted",
        help_text="Default trusted: the caller vouches for the text. Send untrusted when "
        "relaying text from users, tools or other systems.",
    )


class RecallIn(StrictInputSerializer):
    project = ProjectRefField()
    query = serializers.CharField(help_text="Free text (at most 4000 characters).")
    k = serializers.IntegerField(min_value=1, max_value=MAX_RECALL_K, default=5)
    scope = serializers.ChoiceField(
        choices=SCOPES,
        default="project",
        help_text="project: the project's memory; agent: plus that agent's own; session: plus "
        "that session's own.",
    )
    agent = serializers.CharField(
        max_length=MAX_AGENT_CHARS,
        required=False,
        default="",
        allow_blank=True,
        help_text="The agent (scope agent only).",
    )
    session = serializers.UUIDField(
        required=False, allow_null=True, default=None, help_text="The session (scope session only)."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["agent"] and attrs["scope"] != "agent":
            raise serializers.ValidationError({"agent": ["only allowed with scope agent"]})
        if attrs["session"] is not None and attrs["scope"] != "session":
            raise serializers.ValidationError({"session": ["only allowed with scope session"]})
        return attrs


class RecallHitOut(serializers.Serializer):
    id = serializers.UUIDField()
    text = serializers.CharField()
    score = serializers.FloatField(help_text="BM25 score; higher is better.")
    scope = serializers.ChoiceField(choices=SCOPES)
    agent = serializers.CharField()
    session = serializers.UUIDField(source="session_id", allow_null=True)
    trust = serializers.ChoiceField(choices=TRUST_LABELS)
    metadata = serializers.JSONField()
    created_at = serializers.DateTimeField()


class RecallOut(serializers.Serializer):
    results = RecallHitOut(many=True)
