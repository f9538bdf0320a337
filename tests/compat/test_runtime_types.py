"""OpenRath's runtime types and errors exported from ``flow`` (pure: no database)."""

from __future__ import annotations

import uuid

import pytest

from openrath_project import flow
from openrath_project.definition import NodeKind, WorkflowCompiler
from openrath_project.runtime import Run, RunStatus, assert_transition


class Research(flow.Workflow):
    @flow.step(
        entry=True,
        successors=("route",),
        retry=flow.RetryPolicy(max_attempts=3),
        effects="read_only",
    )
    async def search(self, state, ctx):
        return state

    @flow.router(successors=("write", "review"))
    def route(self, state):
        return "write"

    @flow.step()
    def review(self, state, ctx):
        return state

    @flow.step()
    def write(self, state, ctx):
        return state


def test_flow_exports_the_runtime_names():
    for name in (
        "LocalRuntime",
        "SQLiteRunStore",
        "PostgresRunStore",
        "RunStatus",
        "Run",
        "Checkpoint",
        "InterruptKind",
        "ApprovalDecision",
        "ApprovalDecisionKind",
        "RunContext",
        "SecurityContext",
        "Principal",
        "NodeKind",
        "WorkflowCompiler",
        "compile_plan",
        "ConflictError",
        "DefinitionError",
        "PlanMismatchError",
        "InvalidRunTransition",
        "assert_transition",
        "InvocationStatus",
        "arguments_digest",
    ):
        assert getattr(flow, name) is not None, name
    assert flow.ApprovalDecisionKind.EDIT.value == "edit"
    assert flow.RunStatus("succeeded") is flow.RunStatus.SUCCEEDED


def test_transitions_follow_the_product_table():
    assert_transition(RunStatus.QUEUED, RunStatus.RUNNING)
    assert_transition(RunStatus.NEEDS_REVIEW, RunStatus.QUEUED)
    with pytest.raises(flow.InvalidRunTransition, match="succeeded"):
        assert_transition(RunStatus.SUCCEEDED, RunStatus.RUNNING)
    assert issubclass(flow.InvalidRunTransition, flow.ConflictError)


def test_run_values_are_deeply_immutable():
    state = {"nested": {"value": 1}, "items": [1]}
    run = Run.create(plan_id=uuid.uuid4(), tenant_id="t", state=state, next_nodes=("a",))
    state["nested"]["value"] = 2
    assert run.state["nested"]["value"] == 1
    assert run.state["items"] == (1,)
    assert run.version == 0
    assert run.status is RunStatus.QUEUED
    with pytest.raises(TypeError):
        run.state["nested"]["value"] = 3  # type: ignore[index]


def test_compiler_gives_the_product_plan_openrath_shape():
    revision = uuid.uuid4()
    first = WorkflowCompiler().compile(Research(), revision_id=revision)
    second = Research().compile_plan(revision_id=revision)
    assert first.id == second.id
    assert first.revision_id == revision
    assert first.definition_hash == first.plan.hash
    assert [n.id for n in first.nodes] == ["review", "route", "search", "write"]
    route = first.node("route")
    assert route.kind is NodeKind.ROUTER
    assert route.successors == ("write", "review")
    assert first.node("search").retry.max_attempts == 3
    assert first.node("search").effects is flow.EffectClass.READ_ONLY
    assert (first.durable, first.definition.entrypoint, first.definition.version) == (
        True,
        "search",
        "1",
    )
    assert WorkflowCompiler().compile(Research(), revision_id=uuid.uuid4()).id != first.id


def test_compiler_errors_and_opaque_workflows():
    class TwoEntries(flow.Workflow):
        @flow.step(entry=True)
        def one(self, state, ctx):
            return state

        @flow.step(entry=True)
        def two(self, state, ctx):
            return state

    with pytest.raises(flow.DefinitionError, match="exactly one entrypoint"):
        flow.compile_plan(TwoEntries())

    class Eager(flow.Workflow):
        def forward(self, session):
            return session

    plan = flow.compile_plan(Eager())
    assert plan.durable is False
    assert plan.plan is None
    assert plan.nodes[0].kind is NodeKind.OPAQUE
    assert any("checkpoint" in issue for issue in plan.compatibility_issues)


def test_security_values_validate():
    principal = flow.Principal.from_actor("service:ci")
    assert (principal.id, principal.kind) == ("ci", flow.PrincipalKind.SERVICE)
    assert flow.Principal.from_actor("bob").kind is flow.PrincipalKind.USER
    with pytest.raises(ValueError, match="tenant_id"):
        flow.SecurityContext(principal=principal, tenant_id="")
    context = flow.RunContext.local()
    assert (context.tenant_id, context.project, context.principal.actor) == (
        "local",
        "default",
        "user:local",
    )
