"""``POST /api/v1/runs/{id}/replay/``: a regression check of a finished run against the
current code (``runs_app.replay``), returning the stored replay run with its report."""

from __future__ import annotations

from typing import ClassVar

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.views import ScopedAPIView
from openrath_project.tenancy.principal import Principal
from runs_app import selectors
from runs_app.api.serializers import RunOut
from runs_app.models import Run
from runs_app.replay import replay_run


class RunReplayView(ScopedAPIView):
    """Replay a finished run against the current code: a new run of kind ``replay`` (201)."""

    grants: ClassVar[dict[str, str]] = {"POST": "runs:write"}
    audit_actions: ClassVar[dict[str, str]] = {"POST": "run.replay"}
    audit_object_type = "run"
    extra_error_statuses = (409,)
    queryset = Run.objects.none()

    def scope_queryset(self, principal: Principal) -> QuerySet[Run]:
        return selectors.run_list(principal=principal)

    @extend_schema(
        request=None,
        responses={201: RunOut},
        summary="Replay the run against the current code (a regression check; nothing is "
        "performed)",
        description=(
            "Re-executes the run's steps in-process against the workflow as registered now, "
            "with model answers, tool results, selector decisions, interrupt decisions and "
            "effect results served from the run's record (no provider, tool or effect is "
            "called). Returns the replay run (kind replay, replay_of the run; status "
            "succeeded when nothing differs, failed otherwise) whose output is the report: "
            "identical, steps_replayed, first_difference {step, checkpoint, state_diff, "
            "chunk_diff, next_nodes, error, problems, model_request} (model_request: the model "
            "calls asked otherwise than recorded, with the parts that changed: system, "
            "messages, tools, params). 409 run_not_finished unless the run "
            "succeeded or failed; 409 replay_unsupported for a replay or a branch run of a "
            "fan-out (replay its parent)."
        ),
        operation_id="runs_replay_create",
    )
    def post(self, request: Request, pk: str) -> Response:
        original = selectors.run_get(principal=self.principal, run_id=pk, related=("project",))
        self.audit(object_id=original.id, project=original.project)
        replay = replay_run(run=original, actor=self.principal.actor)
        self.audit(
            object_id=replay.id,
            details={
                "replay_of": str(original.id),
                "identical": bool((replay.output or {}).get("identical")),
            },
        )
        return Response(RunOut(replay).data, status=201)
