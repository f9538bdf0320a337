"""OpenRath's ``ApprovalDecisionKind.EDIT`` end to end: a person approves an interrupt with a
changed request; the decision is stored as ``edit`` and the step, run again, sees kind EDIT and
the edited request as its payload. Through the store, the HTTP API and the refusals."""

from __future__ import annotations

import pytest

from openrath_project import flow
from openrath_project.context import RunContext
from openrath_project.definition import EffectClass, step
from openrath_project.errors import ValidationFailed
from openrath_project.runtime import (
    ApprovalDecision,
    ApprovalDecisionKind,
    InterruptKind,
    LocalRuntime,
    RunStatus,
)
from openrath_project.runtime.store import RunStore
from openrath_project.security import Principal, PrincipalKind, SecurityContext
from runs_app.models import Interrupt as InterruptRow
from runs_app.models import Run as RunRow
from runs_app.models import RunEvent as EventRow
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)

#: what each run of the step saw: (kind value, kind is EDIT, approved, payload)
SEEN: list[tuple[str, bool, bool, object]] = []


class SendMail(flow.Workflow):
    name = "compat.decisions.send_mail"

    @step(entry=True, effects=EffectClass.NON_IDEMPOTENT)
    def send(self, state, ctx):
        decision = ctx.interrupt(
            InterruptKind.APPROVAL,
            {"tool": "mail.send", "arguments": {"to": "someone@example.com"}},
            schema={
                "type": "object",
                "required": ["arguments"],
                "properties": {
                    "arguments": {
                        "type": "object",
                        "required": ["to"],
                        "properties": {"to": {"type": "string"}},
                    }
                },
            },
        )
        SEEN.append(
            (
                decision.kind.value,
                decision.kind == ApprovalDecisionKind.EDIT,
                decision.approved,
                decision.payload,
            )
        )
        return {"to": decision.payload["arguments"]["to"], "kind": decision.kind.value}


@pytest.fixture(autouse=True)
def _clear_seen():
    SEEN.clear()
    yield
    SEEN.clear()


def _waiting(context: RunContext | None = None) -> tuple[RunStore, LocalRuntime, object]:
    store = RunStore.configured()
    runtime = LocalRuntime(store)
    runtime.submit(SendMail(), context=context)
    waiting = runtime.work_once(worker_id="w-1")
    assert waiting is not None
    assert waiting.status is RunStatus.WAITING
    return store, runtime, waiting


def _unchanged(run_id: object) -> tuple[object, ...]:
    interrupt = InterruptRow.objects.get(run_id=run_id)
    return (
        RunRow.objects.get(id=run_id).status,
        RunRow.objects.get(id=run_id).event_seq,
        interrupt.status,
        interrupt.decision,
        interrupt.response,
        EventRow.objects.filter(run_id=run_id).count(),
    )


def test_an_edit_through_the_store_is_stored_as_edit_and_the_step_sees_it():
    store, runtime, waiting = _waiting()
    (interrupt,) = store.list_interrupts(tenant_id="local")

    resumed = store.decide_interrupt(
        interrupt.id,
        decision=ApprovalDecision(
            kind=ApprovalDecisionKind.EDIT,
            actor_id="reviewer",
            reason="use the safe address",
            payload={"arguments": {"to": "safe@example.com"}},
        ),
        expected_run_version=waiting.version,
    )

    assert resumed.status is RunStatus.QUEUED
    row = InterruptRow.objects.get(id=interrupt.id)
    assert (row.status, row.decision, row.response, row.resolved_by, row.reason) == (
        "resolved",
        "edit",
        {"arguments": {"to": "safe@example.com"}},
        "reviewer",
        "use the safe address",
    )
    decided = store.get_interrupt(interrupt.id)
    assert decided.decision == "edit"
    assert dict(decided.response) == {"arguments": {"to": "safe@example.com"}}

    done = runtime.work_once(worker_id="w-2")
    assert done is not None
    assert done.status is RunStatus.SUCCEEDED
    assert dict(done.state) == {"to": "safe@example.com", "kind": "edit"}
    assert SEEN == [("edit", True, True, {"arguments": {"to": "safe@example.com"}})]
    decided_events = [
        e for e in store.list_run_events(done.id) if e.product_type == "interrupt.resolved"
    ]
    assert [e.type for e in decided_events] == ["run.interrupt.decided"]


def test_an_edit_needs_the_edited_request_and_it_must_match_the_schema():
    store, _, waiting = _waiting()
    (interrupt,) = store.list_interrupts(tenant_id="local")
    before = _unchanged(waiting.id)

    with pytest.raises(ValidationFailed, match="edit decision needs a response") as empty:
        store.decide_interrupt(
            interrupt.id, decision=ApprovalDecision(kind=ApprovalDecisionKind.EDIT, actor_id="r")
        )
    assert empty.value.details == {"response": ["required for edit"]}
    with pytest.raises(ValidationFailed, match="does not match the schema") as wrong:
        store.decide_interrupt(
            interrupt.id,
            decision=ApprovalDecision(
                kind=ApprovalDecisionKind.EDIT, actor_id="r", payload={"arguments": {"to": 7}}
            ),
        )
    assert list(wrong.value.details) == ["response.arguments.to"]
    assert _unchanged(waiting.id) == before
    assert SEEN == []


def test_respond_is_still_respond():
    store, runtime, waiting = _waiting()
    (interrupt,) = store.list_interrupts(tenant_id="local")
    store.decide_interrupt(
        interrupt.id,
        decision=ApprovalDecision(
            kind=ApprovalDecisionKind.RESPOND,
            actor_id="r",
            payload={"arguments": {"to": "other@example.com"}},
        ),
    )
    assert InterruptRow.objects.get(id=interrupt.id).decision == "respond"
    done = runtime.work_once(worker_id="w-2")
    assert done is not None
    assert dict(done.state) == {"to": "other@example.com", "kind": "respond"}
    assert SEEN == [("respond", False, True, {"arguments": {"to": "other@example.com"}})]


def test_an_edit_over_the_api(tenant, project, make_token, client_for):
    context = RunContext(
        security=SecurityContext(
            principal=Principal(id="alice", kind=PrincipalKind.USER), tenant_id=tenant.slug
        ),
        project=project.slug,
    )
    _, runtime, waiting = _waiting(context)
    row = InterruptRow.objects.get(run_id=waiting.id)
    client = client_for(make_token(["interrupts:read", "interrupts:resolve"]))
    url = f"/api/v1/interrupts/{row.id}/resolve/"
    before = _unchanged(waiting.id)

    missing = client.post(
        url, {"decision": "edit", "request_digest": row.request_digest}, format="json"
    )
    assert missing.status_code == 400
    assert error_of(missing)["details"] == {"response": ["required for edit"]}
    assert _unchanged(waiting.id) == before

    ok = client.post(
        url,
        {
            "decision": "edit",
            "response": {"arguments": {"to": "api@example.com"}},
            "request_digest": row.request_digest,
        },
        format="json",
    )
    assert ok.status_code == 200
    assert (ok.json()["decision"], ok.json()["response"]) == (
        "edit",
        {"arguments": {"to": "api@example.com"}},
    )
    assert RunRow.objects.get(id=waiting.id).status == "queued"
    done = runtime.work_once(worker_id="w-2")
    assert done is not None
    assert dict(done.state) == {"to": "api@example.com", "kind": "edit"}
