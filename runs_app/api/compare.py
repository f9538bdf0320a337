"""``GET /api/v1/runs/{a}/compare/{b}/``: two runs of one fork lineage side by side.

A thin caller of :func:`runs_app.services.compare.run_compare` (what the comparison means is
there and in ``docs/time-travel.md``, "Compare").
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from effects_app.api.serializers import EffectOut
from openrath_project.api.views import ScopedAPIView
from openrath_project.tenancy.principal import Principal
from runs_app import selectors
from runs_app.models import Run
from runs_app.services.compare import (
    COMPARE_CHUNKS_DEFAULT,
    COMPARE_CHUNKS_MAX,
    CompareSide,
    RunComparison,
    run_compare,
)
from sessions_app.api.serializers import ChunkOut


class CompareQuery(serializers.Serializer):
    limit = serializers.IntegerField(
        min_value=1,
        max_value=COMPARE_CHUNKS_MAX,
        default=COMPARE_CHUNKS_DEFAULT,
        help_text="Chunks listed per side after the common prefix (the rest is counted).",
    )


class TimelineSegmentOut(serializers.Serializer):
    run = serializers.UUIDField()
    from_checkpoint = serializers.IntegerField(allow_null=True)
    until_checkpoint = serializers.IntegerField(allow_null=True)


class CompareChunksOut(serializers.Serializer):
    session = serializers.UUIDField(allow_null=True, help_text="The run's working session.")
    start = serializers.IntegerField(help_text="The first position listed: the common length.")
    length = serializers.IntegerField(help_text="The run's view of its session.")
    results = ChunkOut(many=True)
    more = serializers.IntegerField(help_text="Chunks of the run's view after those listed.")


class CompareEffectsOut(serializers.Serializer):
    results = EffectOut(many=True)
    more = serializers.IntegerField()


class CompareSideOut(serializers.Serializer):
    run = serializers.UUIDField()
    workflow = serializers.CharField()
    status = serializers.CharField()
    checkpoints = serializers.IntegerField(help_text="The run's latest checkpoint.")
    branch_checkpoint = serializers.IntegerField(
        allow_null=True,
        help_text="Where this side's lineage leaves the common run (null: it is the common run).",
    )
    timeline = TimelineSegmentOut(many=True)
    state = serializers.JSONField()
    chunks = CompareChunksOut()
    effects = CompareEffectsOut()


class DiffChangeOut(serializers.Serializer):
    op = serializers.ChoiceField(choices=("add", "remove", "replace"))
    path = serializers.CharField(help_text="RFC 6901 JSON Pointer.")
    old = serializers.JSONField(required=False)
    new = serializers.JSONField(required=False)


class CommonOut(serializers.Serializer):
    run = serializers.UUIDField()
    checkpoint = serializers.IntegerField()
    session_length = serializers.IntegerField()
    generations = serializers.IntegerField()


class RunCompareOut(serializers.Serializer):
    common = CommonOut()
    a = CompareSideOut()
    b = CompareSideOut()
    state_diff = DiffChangeOut(many=True)


def _side(side: CompareSide) -> dict[str, Any]:
    run = side.run
    return {
        "run": run.id,
        "workflow": run.workflow,
        "status": run.status,
        "checkpoints": run.checkpoint_seq,
        "branch_checkpoint": side.branch_checkpoint,
        "timeline": [segment.as_dict() for segment in side.timeline],
        "state": side.state,
        "chunks": {
            "session": run.session_id,
            "start": side.chunks_from,
            "length": run.session_len,
            "results": ChunkOut(side.chunks, many=True).data,
            "more": side.chunks_more,
        },
        "effects": {
            "results": EffectOut(side.effects, many=True).data,
            "more": side.effects_more,
        },
    }


def comparison_body(comparison: RunComparison) -> dict[str, Any]:
    """The response body of a comparison (also what the console page reads)."""
    return {
        "common": {
            "run": comparison.common_run.id,
            "checkpoint": comparison.common_checkpoint,
            "session_length": comparison.common_length,
            "generations": comparison.generations,
        },
        "a": _side(comparison.a),
        "b": _side(comparison.b),
        "state_diff": comparison.state_diff,
    }


class RunCompareView(ScopedAPIView):
    """Two runs in the caller's scope, compared through their fork lineage."""

    grants: ClassVar[dict[str, str]] = {"GET": "runs:read"}
    audit_object_type = "run"
    extra_error_statuses = (409,)
    queryset = Run.objects.none()

    def scope_queryset(self, principal: Principal) -> QuerySet[Run]:
        return selectors.run_list(principal=principal)

    def allowed_query_params(self) -> set[str] | None:
        return set(CompareQuery().fields)

    @extend_schema(
        parameters=[CompareQuery],
        responses={200: RunCompareOut},
        summary="Compare two runs of one fork lineage",
        description=(
            "Where the two runs' timelines part (`common`: the nearest run both descend from "
            "through fork edges, or one of the two, and the checkpoint after which they "
            "differ), the diff of their current states (`state_diff`, from `a` to `b`), each "
            "working session's chunks after the shared prefix (at most `limit` a side; "
            "`more` counts the rest, read them with `GET /sessions/{id}/chunks/?after=`), and "
            "the effects each side's timeline recorded after the common checkpoint (its own "
            "and those of its ancestors between the common checkpoint and where it was "
            "forked; not Selector decisions). 404 when either run is not in scope; 409 "
            "`no_common_ancestor` when no fork lineage joins them."
        ),
    )
    def get(self, request: Request, pk: uuid.UUID, other: uuid.UUID) -> Response:
        query = CompareQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        a = selectors.run_get(principal=self.principal, run_id=pk)
        b = selectors.run_get(principal=self.principal, run_id=other)
        self.audit(object_id=a.id, project=a.project, details={"compare_with": str(b.id)})
        comparison = run_compare(a, b, limit=query.validated_data["limit"])
        # The body is built from the output serializers' parts (RunCompareOut is its schema).
        return Response(comparison_body(comparison))
