"""Record and replay: a finished run re-executed against the current code, served from its
record (model turns, tool results, decisions, effects), reports the first step that differs."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from effects_app.models import EffectRecord
from openrath_project.errors import Conflict
from openrath_project.tenancy.models import AuditEvent
from runs_app import registration, services
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent
from runs_app.registry import WorkflowRegistry
from runs_app.replay import replay_run
from sessions_app.models import Chunk, LineageEdge
from sessions_app.selectors import chunk_all
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable, replayable

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_registry(registry: WorkflowRegistry) -> WorkflowRegistry:
    registry.register(replayable.AgentQuote)
    replayable.CALLS.clear()
    replayable.PROVIDER["make"] = replayable.scripted
    yield registry
    replayable.PROVIDER["make"] = replayable.scripted


def _finished(registry: WorkflowRegistry, project, workflow: str, **kwargs) -> Run:
    run, _ = services.run_create(project=project, workflow=registry.get(workflow), **kwargs)
    done = drive(registry, run.id)
    assert done.status in ("succeeded", "failed")
    return done


def _changed(cls) -> WorkflowRegistry:
    changed = WorkflowRegistry()
    changed.register(cls)
    return changed


def test_unchanged_linear_replays_identical(registry, project):
    original = _finished(registry, project, "linear", state={"who": "ada"})
    replay = replay_run(run=original, actor="user:ada", registry=registry)
    report = replay.output
    assert report["identical"] is True, json.dumps(report["first_difference"])
    assert report["first_difference"] is None
    assert report["steps_replayed"] == 3
    assert report["checkpoints_compared"] == Checkpoint.objects.filter(run=original).count()
    assert (replay.kind, replay.replay_of_id, replay.status) == ("replay", original.id, "succeeded")
    assert replay.state == services.run_state_at(original)
    assert replay.created_by == "user:ada"
    # its own session: a fork of the original's start, holding the same chunks again
    assert replay.session_id != original.session_id
    edge = LineageEdge.objects.get(child_id=replay.session_id)
    assert (edge.op, edge.parent_len) == ("fork", 0)
    replayed = [(c.role, c.content) for c in chunk_all(replay.session_id)]
    recorded = [(c.role, c.content) for c in chunk_all(original.session_id)]
    assert replayed == recorded
    assert list(RunEvent.objects.filter(run=replay).values_list("type", flat=True)) == [
        "run.created",
        "replay.finished",
    ]


def test_unchanged_router_replays_identical(registry, project):
    original = _finished(registry, project, "routed", state={"amount": 500})
    report = replay_run(run=original, registry=registry).output
    assert report["identical"] is True, json.dumps(report["first_difference"])
    assert report["steps_replayed"] == 3  # start, decide, large


def test_changed_step_reports_exactly_that_step(registry, project):
    original = _finished(registry, project, "linear", state={"who": "ada"})
    replay = replay_run(run=original, registry=_changed(replayable.LinearChanged))
    report = replay.output
    assert report["identical"] is False
    assert replay.status == "failed"
    assert replay.error["type"] == "ReplayDifference"
    difference = report["first_difference"]
    assert difference["step"] == "two"
    assert difference["checkpoint"] == 2
    assert difference["state_diff"] == [
        {"op": "replace", "path": "/steps/1", "old": "two", "new": "2"}
    ]
    assert difference["chunk_diff"] == [
        {"op": "replace", "path": "/0/content/text", "old": "two", "new": "two, changed"}
    ]
    assert difference["next_nodes"] == {"original": ["three"], "replay": ["three"]}
    assert difference["error"] is None
    assert report["steps_replayed"] == 2  # stopped at the first difference


def test_agent_step_with_a_tool_call_replays_without_provider_or_tool(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    assert replayable.CALLS == ["lookup:A-1", "charge:12"]
    failing = replayable.FailIfCalled()
    replayable.PROVIDER["make"] = lambda: failing
    effects_before = EffectRecord.objects.count()
    report = replay_run(run=original, registry=agent_registry).output
    assert report["identical"] is True, json.dumps(report["first_difference"])
    assert report["model_calls_served"] == 2
    assert report["effects_served"] == 1
    assert failing.calls == 0
    assert replayable.CALLS == ["lookup:A-1", "charge:12"]  # no tool ran, no effect again
    assert EffectRecord.objects.count() == effects_before


def _requests(session_id) -> list[dict[str, str]]:
    """The request digests recorded on the first chunk of each model answer, in order."""
    return [
        c.usage["request"]
        for c in chunk_all(session_id)
        if isinstance(c.usage, dict) and "request" in c.usage
    ]


def test_unchanged_agent_step_asks_exactly_the_recorded_requests(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    recorded = _requests(original.session_id)
    assert len(recorded) == 2  # one per model call, on the first chunk of its answer
    assert all(sorted(r) == ["messages", "params", "system", "tools"] for r in recorded)
    replayable.PROVIDER["make"] = replayable.FailIfCalled
    replay = replay_run(run=original, registry=agent_registry)
    assert replay.output["identical"] is True, json.dumps(replay.output["first_difference"])
    assert _requests(replay.session_id) == recorded


def _request_change(original: Run, workflow) -> tuple[dict, list[dict[str, str]]]:
    replayable.PROVIDER["make"] = replayable.FailIfCalled
    replay = replay_run(run=original, registry=_changed(workflow))
    assert (replay.status, replay.output["identical"]) == ("failed", False)
    difference = replay.output["first_difference"]
    # nothing else differs: the step wrote the same chunks and returned the same state
    assert (difference["step"], difference["checkpoint"]) == ("quote", 1)
    assert (difference["state_diff"], difference["chunk_diff"]) == ([], [])
    assert (difference["error"], difference["next_nodes"]["replay"]) == (None, ["bill"])
    assert replayable.CALLS == ["lookup:A-1", "charge:12"]  # no tool, no effect ran again
    return difference, _requests(original.session_id)


def test_a_prompt_change_alone_is_reported_as_a_model_request_difference(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    difference, recorded = _request_change(original, replayable.AgentQuotePromptChanged)
    changes = difference["model_request"]
    assert [(c["call"], c["agent"], c["parts"]) for c in changes] == [
        (1, "quoter", ["system"]),
        (2, "quoter", ["system"]),
    ]
    assert [c["original"] for c in changes] == [{"system": r["system"]} for r in recorded]
    assert changes[0]["replay"]["system"] != recorded[0]["system"]
    assert difference["problems"] == [
        f"model call {n} (agent 'quoter') was asked otherwise than in the original: "
        "the system prompt changed"
        for n in (1, 2)
    ]


def test_a_tool_schema_change_is_reported_as_a_model_request_difference(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    difference, _ = _request_change(original, replayable.AgentQuoteToolChanged)
    assert [c["parts"] for c in difference["model_request"]] == [["tools"], ["tools"]]


def test_a_model_change_is_reported_as_a_model_request_difference(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    difference, _ = _request_change(original, replayable.AgentQuoteModelChanged)
    assert [c["parts"] for c in difference["model_request"]] == [["params"], ["params"]]


def test_answers_recorded_without_a_request_are_not_checked(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    # as chunks written before requests were recorded: no usage.request
    for chunk in Chunk.objects.filter(run_id=original.id, role="assistant"):
        if isinstance(chunk.usage, dict) and chunk.usage.pop("request", None) is not None:
            chunk.save(update_fields=["usage"])
    assert _requests(original.session_id) == []
    replayable.PROVIDER["make"] = replayable.FailIfCalled
    report = replay_run(run=original, registry=_changed(replayable.AgentQuotePromptChanged)).output
    assert report["identical"] is True, json.dumps(report["first_difference"])


def test_command_names_the_changed_request_parts(agent_registry, project, monkeypatch):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    replayable.PROVIDER["make"] = replayable.FailIfCalled
    monkeypatch.setattr(
        registration, "workflows", lambda: _changed(replayable.AgentQuotePromptChanged)
    )
    code, out = _command("--workflow", "replay_agent", "--fail-on-diff")
    assert code == 1
    assert out.splitlines()[0].startswith(f"{original.id}  DIFFERS at step 'quote' (checkpoint 1)")
    assert out.splitlines()[0].endswith("  model request changed: system")


def test_more_model_calls_than_recorded_is_a_difference(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    replayable.PROVIDER["make"] = replayable.FailIfCalled
    report = replay_run(run=original, registry=_changed(replayable.AgentQuoteMoreCalls)).output
    difference = report["first_difference"]
    assert difference["step"] == "quote"
    assert difference["error"]["type"] == "ReplayDivergence"
    assert "model call 1, beyond the 2 model call(s) recorded" in difference["error"]["message"]
    assert difference["problems"] == [difference["error"]["message"]]


def test_changed_effect_request_is_a_difference_and_not_performed(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    report = replay_run(run=original, registry=_changed(replayable.AgentQuoteBillsMore)).output
    difference = report["first_difference"]
    assert difference["step"] == "bill"
    assert difference["checkpoint"] == 2
    assert (
        "effect 'charge' was recorded with a different request" in (difference["error"]["message"])
    )
    assert replayable.CALLS == ["lookup:A-1", "charge:12"]


def test_an_effect_key_never_recorded_is_a_difference_and_not_performed(agent_registry, project):
    original = _finished(agent_registry, project, "replay_agent", state={"amount": 12})
    report = replay_run(run=original, registry=_changed(replayable.AgentQuoteNewEffect)).output
    difference = report["first_difference"]
    assert (difference["step"], difference["checkpoint"]) == ("bill", 2)
    assert difference["error"] == {
        "type": "ReplayDivergence",
        "message": "effect 'charge-v2' was never recorded by the original step",
        "step": "bill",
    }
    assert replayable.CALLS == ["lookup:A-1", "charge:12"]


def test_only_finished_runs_are_replayed(registry, project):
    run, _ = services.run_create(project=project, workflow=registry.get("linear"))
    with pytest.raises(Conflict) as refused:
        replay_run(run=run, registry=registry)
    assert refused.value.code == "run_not_finished"
    assert not Run.objects.filter(kind="replay").exists()


def test_a_replay_is_never_claimable(registry, project):
    original = _finished(registry, project, "linear")
    replay = replay_run(run=original, registry=registry)
    assert services.lease_claim(worker="w", run_id=replay.id) is None
    with pytest.raises(Conflict) as refused:
        replay_run(run=replay, registry=registry)
    assert refused.value.code == "replay_unsupported"


def test_fan_out_replays_its_branches_and_join(registry, project):
    original = _finished(registry, project, "parallel")
    replay = replay_run(run=original, registry=registry)
    report = replay.output
    assert report["identical"] is True, json.dumps(report["first_difference"])
    # plan, split, left, right, merge; the router's, both branches' and the join's checkpoints
    assert report["steps_replayed"] == 5
    assert (
        report["checkpoints_compared"]
        == Checkpoint.objects.filter(
            run__in=[original, *Run.objects.filter(parent=original)]
        ).count()
    )
    assert replay.state == services.run_state_at(original)
    assert [c.content["text"] for c in chunk_all(replay.session_id)] == [
        c.content["text"] for c in chunk_all(original.session_id)
    ]


def test_a_changed_branch_is_reported_with_its_branch(registry, project):
    original = _finished(registry, project, "parallel")
    right = Run.objects.get(parent=original, branch="right")
    report = replay_run(run=original, registry=_changed(replayable.ParallelChanged)).output
    difference = report["first_difference"]
    assert (difference["branch"], difference["branch_run"]) == ("right", str(right.id))
    assert (difference["step"], difference["checkpoint"]) == ("right", 1)
    assert difference["state_diff"] == [{"op": "replace", "path": "/found", "old": "B", "new": "C"}]


def test_a_branch_run_is_refused(registry, project):
    original = _finished(registry, project, "parallel")
    branch = Run.objects.filter(parent=original).first()
    with pytest.raises(Conflict) as refused:
        replay_run(run=branch, registry=registry)
    assert refused.value.code == "replay_unsupported"
    assert refused.value.details == {"reason": "branch", "parent": str(original.id)}


def test_failed_run_replays_its_failure(registry, project):
    original = _finished(registry, project, "flaky", state={"succeed_on": 99})
    assert original.status == "failed"
    report = replay_run(run=original, registry=registry).output
    # the current code fails the same way in the same step: no difference
    assert report["identical"] is True, json.dumps(report["first_difference"])


# --- The command ---------------------------------------------------------------------------


def _command(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("replay_runs", *args, stdout=out)
    except CommandError as failed:
        return failed.returncode, out.getvalue()
    return 0, out.getvalue()


def test_command_exit_codes(registry, project, monkeypatch):
    first = _finished(registry, project, "linear", state={"who": "ada"})
    second = _finished(registry, project, "linear", state={"who": "bob"})
    code, out = _command("--workflow", "linear", "--fail-on-diff")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{second.id}  identical  steps=3  replay=")
    assert lines[1].startswith(f"{first.id}  identical  steps=3  replay=")
    assert lines[2] == "replayed 2 run(s) of linear: 2 identical, 0 different, 0 skipped"
    assert Run.objects.filter(kind="replay").count() == 2

    monkeypatch.setattr(registration, "workflows", lambda: _changed(replayable.LinearChanged))
    code, out = _command("--workflow", "linear", "--limit", "1", "--fail-on-diff")
    assert code == 1
    assert out.splitlines()[0].startswith(f"{second.id}  DIFFERS at step 'two' (checkpoint 2)")
    assert out.splitlines()[-1] == (
        "replayed 1 run(s) of linear: 0 identical, 1 different, 0 skipped"
    )
    code, _ = _command("--workflow", "linear", "--limit", "1")  # a report, not a failure
    assert code == 0
    code, out = _command(
        "--workflow",
        "linear",
        "--tenant",
        "acme",
        "--project",
        "research",
        "--since",
        "2999-01-01T00:00:00Z",
    )
    assert (code, out.splitlines()[-1]) == (
        0,
        "replayed 0 run(s) of linear: 0 identical, 0 different, 0 skipped",
    )
    assert AuditEvent.objects.filter(action="run.replay").count() == 4


# --- The API ---------------------------------------------------------------------------------


def test_api_replays_and_scopes(registry, project, make_token, client_for, other_tenant):
    original = _finished(registry, project, "linear", state={"who": "ada"})
    url = f"/api/v1/runs/{original.id}/replay/"

    foreign = client_for(make_token(["*"], tenant=other_tenant)).post(url, format="json")
    assert foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "not_found"
    reader = client_for(make_token(["runs:read"])).post(url, format="json")
    assert reader.status_code == 403
    assert not Run.objects.filter(kind="replay").exists()

    writer = client_for(make_token(["runs:write", "runs:read"]))
    created = writer.post(url, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["kind"], body["replay_of"], body["status"]) == (
        "replay",
        str(original.id),
        "succeeded",
    )
    assert body["output"]["identical"] is True
    assert body["output"]["steps_replayed"] == 3
    audits = AuditEvent.objects.filter(action="run.replay").order_by("id")
    assert [(a.status_code, a.object_id) for a in audits] == [
        (404, ""),
        (403, ""),
        (201, body["id"]),
    ]
    assert audits[2].details["replay_of"] == str(original.id)

    listed = writer.get("/api/v1/runs/").json()["results"]
    assert [r["id"] for r in listed] == [str(original.id)]  # replays are left out by default
    replays = writer.get("/api/v1/runs/?kind=replay").json()["results"]
    assert [r["id"] for r in replays] == [body["id"]]

    unfinished, _ = services.run_create(project=project, workflow=registry.get("linear"))
    refused = writer.post(f"/api/v1/runs/{unfinished.id}/replay/", format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "run_not_finished"
    assert Run.objects.filter(kind="replay").count() == 1


# --- Decisions: a selector's and a person's ---------------------------------------------------


def test_selector_decision_is_served_from_the_ledger(registry, project):
    registry.register(replayable.Triage)
    original = _finished(registry, project, "replay_selector", user_message="My invoice is wrong")
    assert original.output["team"] == "Billing"
    decision = EffectRecord.objects.get(run=original, effect_class="decision")
    assert decision.key == "decision@0:selector:triage:0"
    failing = replayable.FailIfCalled()
    saved = replayable.SELECTOR_PROVIDER["make"]
    replayable.SELECTOR_PROVIDER["make"] = lambda: failing
    try:
        report = replay_run(run=original, registry=registry).output
    finally:
        replayable.SELECTOR_PROVIDER["make"] = saved
    assert report["identical"] is True, json.dumps(report["first_difference"])
    assert failing.calls == 0


def test_interrupt_decision_is_served_and_the_effect_not_performed(registry, project):
    durable.PUBLISHED.clear()
    run, _ = services.run_create(
        project=project, workflow=registry.get("approval"), state={"report": "Q3"}
    )
    waiting = drive(registry, run.id)
    interrupt = Interrupt.objects.get(run=waiting)
    interrupt_resolve(
        interrupt=interrupt,
        decision="approve",
        response={"note": "ship it"},
        request_digest=interrupt.request_digest,
        actor="user:olivia",
    )
    original = drive(registry, run.id)
    assert (original.status, durable.PUBLISHED) == ("succeeded", ["Q3"])
    report = replay_run(run=original, registry=registry).output
    assert report["identical"] is True, json.dumps(report["first_difference"])
    assert report["effects_served"] == 1
    assert durable.PUBLISHED == ["Q3"]
    assert Interrupt.objects.filter(run__kind="replay").count() == 0


def test_a_fixed_failure_is_a_difference(registry, project):
    original = _finished(registry, project, "flaky", state={"succeed_on": 99})
    report = replay_run(run=original, registry=_changed(replayable.FlakyFixed)).output
    difference = report["first_difference"]
    assert (difference["step"], difference["checkpoint"], difference["error"]) == (
        "call",
        None,
        None,
    )
    assert difference["original_error"]["type"] == "ConnectionError"
    assert difference["original_error"]["attempt"] == 3
