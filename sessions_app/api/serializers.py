"""Input and output shapes of the sessions API (DESIGN section 10)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from openrath_project.api.serializers import (
    OutputModelSerializer,
    ProjectRefField,
    StrictInputSerializer,
)
from openrath_project.jsonlimits import MAX_VALUE_DEPTH, json_problem
from sessions_app.chunk_rules import (
    KINDS,
    MAX_CHUNK_COST_USD,
    MAX_CHUNK_TOKENS,
    MAX_SEQ,
    ROLES,
    TRUST_LABELS,
    ChunkInvalid,
    check_client_chunk,
)
from sessions_app.models import Chunk, Session
from sessions_app.selectors import LINEAGE_DIRECTIONS
from sessions_app.services import MAX_CHUNKS_PER_APPEND, MERGE_STRATEGIES


class UsageOut(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    cost_usd = serializers.FloatField()


class BaseRefOut(serializers.Serializer):
    session = serializers.UUIDField()
    length = serializers.IntegerField()


class SessionOut(OutputModelSerializer):
    """A session. ``parents`` are its lineage parents (a detached session has none)."""

    project = serializers.UUIDField(source="project_id")
    parents = serializers.SerializerMethodField()
    length = serializers.IntegerField()
    usage = UsageOut()
    base = serializers.SerializerMethodField()
    run = serializers.UUIDField(source="run_id", allow_null=True)

    class Meta:
        model = Session
        fields = (
            "id",
            "project",
            "title",
            "op",
            "parents",
            "length",
            "usage",
            "placement",
            "metadata",
            "created_at",
            "updated_at",
            "base",
            "agent",
            "workflow",
            "run",
            "step",
            "created_by",
            "incomplete",
            "provenance",
        )

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_parents(self, obj: Session) -> list[str]:
        edges = getattr(obj, "prefetched_parent_edges", None)
        if edges is None:
            edges = list(obj.parent_edges.order_by("position", "id"))
        return [str(e.parent_id) for e in edges if e.op != "detach"]

    @extend_schema_field(BaseRefOut(allow_null=True))
    def get_base(self, obj: Session) -> dict[str, Any] | None:
        if obj.base_id is None:
            return None
        return {"session": str(obj.base_id), "length": obj.base_len}


class ChunkOut(OutputModelSerializer):
    """A chunk of a session's logical list; ``session`` is where it is stored."""

    run = serializers.UUIDField(source="run_id", allow_null=True)
    session = serializers.UUIDField(source="session_id")
    usage = serializers.JSONField(allow_null=True)
    content = serializers.JSONField()

    class Meta:
        model = Chunk
        fields = (
            "seq",
            "role",
            "kind",
            "content",
            "agent",
            "workflow",
            "run",
            "step",
            "tool_call_id",
            "trust",
            "usage",
            "created_at",
            "session",
            "branch",
        )


class ChunkIn(StrictInputSerializer):
    role = serializers.ChoiceField(choices=ROLES)
    kind = serializers.ChoiceField(choices=KINDS, default="message")
    content = serializers.DictField(
        help_text="By kind: message {text}; tool_call {id, name, arguments}; tool_result "
        "{tool_call_id, name, output, error?}; summary {text}; event {...}. Artifact "
        "references (kind artifact, a tool result's artifact) are recorded by the product only."
    )
    agent = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    tool_call_id = serializers.CharField(max_length=200, required=False, allow_blank=True)
    trust = serializers.ChoiceField(choices=TRUST_LABELS, required=False)
    usage = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="prompt_tokens, completion_tokens, total_tokens: integers "
        f"0..{MAX_CHUNK_TOKENS}; cost_usd: a number 0..{MAX_CHUNK_COST_USD}.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            check_client_chunk(attrs.get("kind", "message"), attrs.get("content"))
        except ChunkInvalid as exc:
            raise serializers.ValidationError({exc.field: [exc.message]}) from exc
        return attrs


def _checked_metadata(value: dict[str, Any]) -> dict[str, Any]:
    problem = json_problem(value, root="metadata", max_depth=MAX_VALUE_DEPTH)
    if problem is not None:
        raise serializers.ValidationError(problem.text())
    return value


class SessionCreateIn(StrictInputSerializer):
    project = ProjectRefField()
    title = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)
    user_message = serializers.CharField(required=False, max_length=200_000)
    chunks = ChunkIn(many=True, required=False, max_length=MAX_CHUNKS_PER_APPEND)  # type: ignore[call-arg]
    metadata = serializers.DictField(required=False, default=dict)

    def validate_metadata(self, value: dict[str, Any]) -> dict[str, Any]:
        return _checked_metadata(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "user_message" in attrs and "chunks" in attrs:
            raise serializers.ValidationError(
                {"user_message": ["give user_message or chunks, not both"]}
            )
        return attrs


class ChunksAppendIn(StrictInputSerializer):
    chunks = ChunkIn(many=True, min_length=1, max_length=MAX_CHUNKS_PER_APPEND)  # type: ignore[call-arg]


class ForkIn(StrictInputSerializer):
    title = serializers.CharField(max_length=300, required=False)
    at = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_SEQ,
        help_text="Fork at this length (default: the current length).",
    )


class DetachIn(StrictInputSerializer):
    title = serializers.CharField(max_length=300, required=False)


class MergeIn(StrictInputSerializer):
    sessions = serializers.ListField(child=serializers.UUIDField(), min_length=2, max_length=32)
    strategy = serializers.ChoiceField(choices=MERGE_STRATEGIES, default="concat")
    title = serializers.CharField(max_length=300, required=False)


class LineageEdgeOut(serializers.Serializer):
    # "parent" shadows Field.parent in the stubs; DRF moves declared fields aside at runtime.
    parent = serializers.UUIDField(source="parent_id")  # type: ignore[assignment]
    child = serializers.UUIDField(source="child_id")
    op = serializers.CharField()
    at = serializers.IntegerField(source="parent_len")
    position = serializers.IntegerField()
    agent = serializers.CharField()
    workflow = serializers.CharField(
        help_text="The workflow path (outer/inner) whose code made the edge; empty if none did."
    )
    run = serializers.UUIDField(source="run_id", allow_null=True)
    step = serializers.CharField()


class LineageAgentOut(serializers.Serializer):
    agent = serializers.CharField()
    chunks = serializers.IntegerField(
        help_text="How many of the session's own chunks the agent wrote (0: the session's "
        "producing agent, when no chunk names one)."
    )


class LineageNodeOut(SessionOut):
    """A session of a lineage page, with the agents of its own chunks, most chunks first (a
    merge's copies of its branches' chunks left out): what the console colours nodes by."""

    agents = serializers.SerializerMethodField()

    class Meta:
        model = Session
        fields: tuple[str, ...] = (*SessionOut.Meta.fields, "agents")

    @extend_schema_field(LineageAgentOut(many=True))
    def get_agents(self, obj: Session) -> list[dict[str, Any]]:
        own = self.context.get("agents", {}).get(str(obj.id))
        if own is None and obj.agent:
            own = [{"agent": obj.agent, "chunks": 0}]
        return own or []


class LineageOut(serializers.Serializer):
    nodes = LineageNodeOut(many=True)
    edges = LineageEdgeOut(many=True)
    next = serializers.CharField(allow_null=True)


class LineageQuery(serializers.Serializer):
    direction = serializers.ChoiceField(choices=LINEAGE_DIRECTIONS, default="graph")
    limit = serializers.IntegerField(min_value=1, max_value=500, default=200)
    after = serializers.UUIDField(required=False)


class ChunkPageQuery(serializers.Serializer):
    after = serializers.IntegerField(min_value=-1, max_value=MAX_SEQ, default=-1)
    limit = serializers.IntegerField(
        min_value=1, default=100
    )  # the view: <= OPENRATH_MAX_PAGE_SIZE


class ImportFileIn(StrictInputSerializer):
    name = serializers.CharField(max_length=300)
    content = serializers.CharField(trim_whitespace=False)


class ImportIn(StrictInputSerializer):
    project = ProjectRefField()
    files = ImportFileIn(many=True, min_length=1, max_length=200)  # type: ignore[call-arg]


class ImportJSONLinesQuery(serializers.Serializer):
    """The query of an import whose body is one JSON Lines file."""

    project = ProjectRefField()
    name = serializers.CharField(max_length=300, default="body.jsonl")


class ImportOut(serializers.Serializer):
    sessions = SessionOut(many=True)
    mapping = serializers.DictField(
        child=serializers.UUIDField(), help_text="original id -> new session id"
    )
