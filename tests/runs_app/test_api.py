"""Runs, workflows, interrupts and effects over the API: matrix, shapes, idempotency, limits."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from effects_app.models import EffectRecord
from openrath_project.jsontext import digest
from openrath_project.tenancy.models import ApiToken
from openrath_project.tenancy.services import token_revoke
from runs_app import reconciler, services
from runs_app.models import Interrupt, Run, RunEvent
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)


def _state():
    return (
        Run.objects.count(),
        RunEvent.objects.count(),
        Interrupt.objects.count(),
        EffectRecord.objects.count(),
        list(Run.objects.order_by("id").values_list("status", flat=True)),
        list(Interrupt.objects.order_by("id").values_list("status", flat=True)),
        list(EffectRecord.objects.order_by("id").values_list("status", flat=True)),
    )


@pytest.fixture
def world(registry, project):
    """A finished run, a run waiting on an interrupt, an effect that needs review."""
    done, _ = services.run_create(project=project, workflow=registry.get("linear"), state={})
    drive(registry, done.id)
    waiting, _ = services.run_create(
        project=project, workflow=registry.get("approval"), state={"report": "Q3"}
    )
    drive(registry, waiting.id)
    review, _ = services.run_create(
        project=project, workflow=registry.get("approval"), state={"report": "Q4"}
    )
    drive(registry, review.id)
    interrupt = Interrupt.objects.get(run=review)
    from runs_app.interrupts import interrupt_resolve

    interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "x"})
    durable.CRASH["publish"] = True
    with pytest.raises(KeyboardInterrupt):
        drive(registry, review.id)
    Run.objects.filter(id=review.id).update(lease_expires_at=timezone.now() - timedelta(1))
    reconciler.reconcile()
    drive(registry, review.id)
    assert Run.objects.get(id=review.id).status == "needs_review"
    return {
        "done": done,
        "waiting": Interrupt.objects.get(run=waiting),
        "effect": EffectRecord.objects.get(run=review),
        "review": review,
    }


def _endpoints(world):
    done, interrupt, effect = world["done"], world["waiting"], world["effect"]
    return [
        ("get", f"/api/v1/runs/{done.id}/", None, "runs:read", 200),
        ("get", f"/api/v1/runs/{done.id}/events/", None, "runs:read", 200),
        ("get", f"/api/v1/runs/{done.id}/checkpoints/", None, "runs:read", 200),
        ("post", "/api/v1/runs/", {"workflow": "linear", "project": "research"}, "runs:write", 201),
        ("post", f"/api/v1/runs/{interrupt.run_id}/cancel/", {"reason": "x"}, "runs:cancel", 200),
        (
            "post",
            f"/api/v1/runs/{world['review'].id}/resume/",
            {"reason": "checked"},
            "runs:write",
            200,
        ),
        ("get", f"/api/v1/interrupts/{interrupt.id}/", None, "interrupts:read", 200),
        ("get", f"/api/v1/effects/{effect.id}/", None, "effects:read", 200),
        (
            "post",
            f"/api/v1/effects/{effect.id}/resolve/",
            {"outcome": "applied", "result": {"ok": 1}, "request_digest": effect.request_digest},
            "effects:resolve",
            200,
        ),
    ]


def _call(client, method, path, body):
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


@pytest.mark.parametrize(
    "who", ["anonymous", "revoked", "expired", "other_tenant", "other_project", "missing_grant"]
)
def test_every_endpoint_refuses_and_changes_nothing(
    who, world, make_token, client_for, other_tenant, other_project
):
    if who == "anonymous":
        raw = None
    elif who == "revoked":
        raw = make_token(["*"])
        token_revoke(prefix=raw)
    elif who == "expired":
        raw = make_token(["*"], expires_in=timedelta(seconds=60))
        ApiToken.objects.update(
            created_at=timezone.now() - timedelta(hours=1),
            expires_at=timezone.now() - timedelta(minutes=1),
        )
    elif who == "other_tenant":
        raw = make_token(["*"], tenant=other_tenant)
    elif who == "other_project":
        raw = make_token(["*"], projects=[other_project])
    else:
        raw = make_token(["projects:read", "sessions:read"])
    client = client_for(raw)
    for method, path, body, grant, _ in _endpoints(world):
        before = _state()
        response = _call(client, method, path, body)
        expected = {"anonymous": 401, "revoked": 401, "expired": 401, "missing_grant": 403}.get(
            who, 404
        )
        assert response.status_code == expected, (who, path, response.content[:200])
        error = error_of(response)
        if expected == 403:
            assert error["details"] == {"required_grant": grant}
        assert _state() == before, (who, path)


def test_allowed_principal(world, make_token, client_for):
    client = client_for(
        make_token(
            [
                "runs:read",
                "runs:write",
                "runs:cancel",
                "interrupts:read",
                "effects:read",
                "effects:resolve",
            ]
        )
    )
    for method, path, body, _, status in _endpoints(world):
        response = _call(client, method, path, body)
        assert response.status_code == status, (path, response.content[:300])


def test_lists_are_scoped(world, make_token, client_for, other_tenant, other_project):
    mine = client_for(make_token(["runs:read", "interrupts:read", "effects:read"]))
    assert len(mine.get("/api/v1/runs/").json()["results"]) == 3
    assert len(mine.get("/api/v1/interrupts/").json()["results"]) == 2
    assert len(mine.get("/api/v1/effects/").json()["results"]) == 1
    assert [
        i["status"] for i in mine.get("/api/v1/interrupts/", {"state": "pending"}).json()["results"]
    ] == ["pending"]
    assert len(mine.get("/api/v1/effects/", {"state": "needs_review"}).json()["results"]) == 1
    assert len(mine.get("/api/v1/runs/", {"status": "succeeded"}).json()["results"]) == 1
    for raw in (
        make_token(["*"], tenant=other_tenant),
        make_token(["*"], projects=[other_project]),
    ):
        client = client_for(raw)
        for url in ("/api/v1/runs/", "/api/v1/interrupts/", "/api/v1/effects/"):
            assert client.get(url).json()["results"] == [], url


def test_run_shapes(world, make_token, client_for):
    client = client_for(make_token(["runs:read"]))
    body = client.get(f"/api/v1/runs/{world['done'].id}/").json()
    assert {
        "id",
        "workflow",
        "project",
        "status",
        "state",
        "output",
        "error",
        "session",
        "parent",
        "priority",
        "deadline",
        "attempt",
        "created_at",
        "started_at",
        "finished_at",
    } <= set(body)
    assert (body["workflow"], body["status"], body["output"]["done"]) == (
        "linear",
        "succeeded",
        True,
    )
    events = client.get(f"/api/v1/runs/{world['done'].id}/events/").json()
    assert [e["seq"] for e in events["results"]] == [1, 2, 3, 4, 5, 6]
    assert set(events["results"][0]) == {"seq", "type", "step", "data", "created_at"}
    after = client.get(f"/api/v1/runs/{world['done'].id}/events/", {"after": 4}).json()
    assert [e["type"] for e in after["results"]] == ["step.completed", "run.succeeded"]
    checkpoints = client.get(f"/api/v1/runs/{world['done'].id}/checkpoints/").json()["results"]
    assert [(c["seq"], c["step"], c["state"]["steps"]) for c in checkpoints] == [
        (1, "one", ["one"]),
        (2, "two", ["one", "two"]),
        (3, "three", ["one", "two", "three"]),
    ]
    assert checkpoints[1]["session"]["length"] == 2


def test_create_run_validation_idempotency_and_cap(
    registry, project, make_token, client_for, settings
):
    client = client_for(make_token(["runs:write", "runs:read"]))
    url = "/api/v1/runs/"
    cases = [
        ({"workflow": "nope", "project": "research"}, "workflow", "unknown_workflow"),
        ({"workflow": "linear", "project": "research", "priority": 500}, "priority", "invalid"),
        ({"workflow": "linear", "project": "research", "state": [1]}, "state", "invalid"),
        ({"workflow": "linear", "project": "research", "mood": "x"}, "mood", "invalid"),
        (
            {
                "workflow": "linear",
                "project": "research",
                "deadline": (timezone.now() - timedelta(hours=1)).isoformat(),
            },
            "deadline",
            "invalid",
        ),
    ]
    for body, field, code in cases:
        response = client.post(url, body, format="json")
        assert response.status_code == 400, body
        error = error_of(response)
        assert error["code"] == code
        if code == "invalid":
            assert field in error["details"]
    assert (
        client.post(url, {"workflow": "linear", "project": "nope"}, format="json").status_code
        == 404
    )
    assert Run.objects.count() == 0
    body = {"workflow": "linear", "project": "research", "state": {"who": "ada"}}
    first = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    again = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    other = client.post(
        url, {**body, "state": {"who": "bob"}}, format="json", HTTP_IDEMPOTENCY_KEY="order-1"
    )
    assert other.status_code == 409
    assert error_of(other)["code"] == "idempotency_conflict"
    assert Run.objects.count() == 1
    settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT = 2
    assert client.post(url, body, format="json").status_code == 201
    capped = client.post(url, body, format="json")
    assert capped.status_code == 429
    assert capped["Retry-After"] == "5"
    assert error_of(capped)["details"] == {"queued": 2, "limit": 2}
    assert Run.objects.count() == 2


def test_cancel_and_resume_rules(world, make_token, client_for):
    client = client_for(make_token(["runs:write", "runs:cancel"]))
    done = client.post(f"/api/v1/runs/{world['done'].id}/cancel/", {}, format="json")
    assert done.status_code == 409
    resume_wrong = client.post(
        f"/api/v1/runs/{world['done'].id}/resume/", {"reason": "x"}, format="json"
    )
    assert resume_wrong.status_code == 409
    no_reason = client.post(f"/api/v1/runs/{world['review'].id}/resume/", {}, format="json")
    assert no_reason.status_code == 400
    assert "reason" in error_of(no_reason)["details"]


def test_interrupt_resolution_over_the_api(world, make_token, client_for, registry):
    interrupt = world["waiting"]
    client = client_for(make_token(["interrupts:read", "interrupts:resolve"]))
    url = f"/api/v1/interrupts/{interrupt.id}/resolve/"
    bad = client.post(
        url,
        {
            "decision": "approve",
            "response": {"note": 7},
            "request_digest": interrupt.request_digest,
        },
        format="json",
    )
    assert bad.status_code == 400
    assert "response.note" in error_of(bad)["details"]
    mismatch = client.post(
        url,
        {"decision": "approve", "response": {"note": "ok"}, "request_digest": "a" * 64},
        format="json",
    )
    assert mismatch.status_code == 409
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"
    ok = client.post(
        url,
        {
            "decision": "respond",
            "response": {"note": "ok"},
            "request_digest": interrupt.request_digest,
            "reason": "fine",
        },
        format="json",
    )
    assert ok.status_code == 200
    body = ok.json()
    assert (body["status"], body["decision"], body["response"], body["resolved_by"]) == (
        "resolved",
        "respond",
        {"note": "ok"},
        f"token:{client._credentials['HTTP_AUTHORIZATION'].split('_')[1]}",
    )
    again = client.post(
        url, {"decision": "reject", "request_digest": interrupt.request_digest}, format="json"
    )
    assert again.status_code == 409
    assert error_of(again)["code"] == "already_resolved"
    assert Run.objects.get(id=interrupt.run_id).status == "queued"
    done = drive(registry, interrupt.run_id)
    assert done.output["note"] == "ok"
    from openrath_project.tenancy.models import AuditEvent

    audit = AuditEvent.objects.filter(action="interrupt.resolve").order_by("id")
    assert [a.outcome for a in audit] == ["failure", "failure", "success", "failure"]
    assert audit[2].details["request_digest"] == interrupt.request_digest


def test_resolving_an_interrupt_over_the_api_takes_the_digest_of_the_request_seen(
    world, make_token, client_for
):
    """Nobody approves what they did not see: no digest is a 400 naming it, the digest of a
    request that has changed since is a 409, and only the current one decides."""
    interrupt = world["waiting"]
    client = client_for(make_token(["interrupts:read", "interrupts:resolve"]))
    url = f"/api/v1/interrupts/{interrupt.id}/resolve/"
    body = {"decision": "respond", "response": {"note": "ship"}}
    before = _state()

    missing = client.post(url, body, format="json")
    assert missing.status_code == 400
    assert error_of(missing)["code"] == "invalid"
    assert error_of(missing)["details"] == {"request_digest": ["This field is required."]}
    malformed = client.post(url, {**body, "request_digest": "not-a-digest"}, format="json")
    assert malformed.status_code == 400
    assert list(error_of(malformed)["details"]) == ["request_digest"]
    assert _state() == before

    seen = client.get(f"/api/v1/interrupts/{interrupt.id}/").json()["request_digest"]
    assert seen == interrupt.request_digest
    changed = {"report": "Q3", "amended": True}
    Interrupt.objects.filter(id=interrupt.id).update(
        request=changed, request_digest=digest(changed)
    )
    stale = client.post(url, {**body, "request_digest": seen}, format="json")
    assert stale.status_code == 409
    assert error_of(stale)["code"] == "digest_mismatch"
    assert error_of(stale)["details"] == {"request_digest": digest(changed)}
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"
    assert Run.objects.get(id=interrupt.run_id).status == "waiting"

    current = client.get(f"/api/v1/interrupts/{interrupt.id}/").json()["request_digest"]
    ok = client.post(url, {**body, "request_digest": current}, format="json")
    assert ok.status_code == 200
    assert (ok.json()["status"], ok.json()["decision"]) == ("resolved", "respond")
    assert Run.objects.get(id=interrupt.run_id).status == "queued"
    from openrath_project.tenancy.models import AuditEvent

    audit = AuditEvent.objects.filter(action="interrupt.resolve").order_by("id")
    assert [(a.outcome, a.status_code) for a in audit] == [
        ("failure", 400),
        ("failure", 400),
        ("failure", 409),
        ("success", 200),
    ]
    assert audit[3].details["request_digest"] == digest(changed)


def test_workflows_endpoint(registry, make_token, client_for):
    client = client_for(make_token(["runs:read"]))
    listed = client.get("/api/v1/workflows/").json()["results"]
    names = [w["name"] for w in listed]
    assert "linear" in names
    assert "parallel" in names
    detail = client.get("/api/v1/workflows/parallel/").json()
    assert detail["plan"] == registry.get("parallel").plan.hash
    assert {n["id"] for n in detail["graph"]["nodes"]} == {
        "plan",
        "split",
        "left",
        "right",
        "merge",
    }
    assert client.get("/api/v1/workflows/nope/").status_code == 404
    assert client_for(make_token(["sessions:read"])).get("/api/v1/workflows/").status_code == 403
