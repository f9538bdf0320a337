"""The effects API (effects_app/api/): listing and its filters, the tenant and project scope,
and resolving an effect bound to the digest of the request the reviewer saw."""

from __future__ import annotations

import pytest

from effects_app.models import EffectRecord
from openrath_project.jsontext import digest
from openrath_project.tenancy.models import AuditEvent
from runs_app.models import Run, RunEvent
from tests.factories.effects import EffectRecordFactory
from tests.factories.runs import RunFactory
from tests.support import error_of

pytestmark = pytest.mark.django_db

LIST = "/api/v1/effects/"


def _resolve_url(effect: EffectRecord) -> str:
    return f"/api/v1/effects/{effect.id}/resolve/"


def _ledger() -> list[tuple]:
    """Everything a resolution may change: each effect's and each run's status."""
    return [
        *EffectRecord.objects.order_by("id").values_list("id", "status", "resolution"),
        *Run.objects.order_by("id").values_list("id", "status"),
        ("events", RunEvent.objects.count()),
    ]


@pytest.fixture
def reader(make_token, client_for):
    return client_for(make_token(["effects:read"]))


@pytest.fixture
def reviewer(make_token, client_for):
    return client_for(make_token(["effects:read", "effects:resolve"]))


@pytest.fixture
def review(project):
    """A run stopped on one effect that needs review."""
    return EffectRecordFactory(run=RunFactory(project=project, status="needs_review"))


class TestList:
    def test_newest_first_with_the_fields_a_reviewer_needs(self, reader, project, review):
        done = EffectRecordFactory(run=review.run, status="succeeded", result={"sent": True})
        EffectRecordFactory(run=review.run, effect_class="decision", status="succeeded")
        body = reader.get(LIST).json()
        assert [e["id"] for e in body["results"]] == [str(done.id), str(review.id)]
        shown = body["results"][1]
        assert (shown["run"], shown["project"], shown["status"], shown["key"]) == (
            str(review.run_id),
            str(project.id),
            "needs_review",
            review.key,
        )
        assert (shown["request"], shown["request_digest"]) == (
            review.request,
            digest(review.request),
        )

    @pytest.mark.parametrize("parameter", ["status", "state"])
    def test_the_status_filter_and_its_deprecated_alias(self, reader, review, parameter):
        done = EffectRecordFactory(run=review.run, status="succeeded")
        for status, expected in (("needs_review", [review]), ("succeeded", [done]), ("failed", [])):
            body = reader.get(LIST, {parameter: status}).json()
            assert [e["id"] for e in body["results"]] == [str(e.id) for e in expected], status

    def test_an_unknown_status_is_a_400_naming_the_parameter(self, reader, review):
        response = reader.get(LIST, {"status": "lost"})
        assert response.status_code == 400
        assert list(error_of(response)["details"]) == ["status"]

    def test_the_run_and_project_filters(self, reader, review, other_project):
        elsewhere = EffectRecordFactory(
            run=RunFactory(project=other_project, status="needs_review")
        )
        by_run = reader.get(LIST, {"run": str(review.run_id)}).json()["results"]
        assert [e["id"] for e in by_run] == [str(review.id)]
        by_project = reader.get(LIST, {"project": "ops"}).json()["results"]
        assert [e["id"] for e in by_project] == [str(elsewhere.id)]

    def test_another_tenant_or_project_lists_nothing(
        self, make_token, client_for, review, other_tenant, other_project
    ):
        for raw in (
            make_token(["*"], tenant=other_tenant),
            make_token(["*"], projects=[other_project]),
        ):
            assert client_for(raw).get(LIST).json()["results"] == []


class TestScope:
    def test_another_tenants_effect_is_a_404_and_stays_unresolved(
        self, make_token, client_for, review, other_tenant
    ):
        theirs = client_for(make_token(["*"], tenant=other_tenant))
        before = _ledger()
        opened = theirs.get(f"/api/v1/effects/{review.id}/")
        assert opened.status_code == 404
        assert error_of(opened)["code"] == "not_found"
        resolved = theirs.post(
            _resolve_url(review),
            {"outcome": "not_applied", "request_digest": review.request_digest},
            format="json",
        )
        assert resolved.status_code == 404
        assert _ledger() == before

    def test_a_token_of_another_project_gets_a_404(
        self, make_token, client_for, review, other_project
    ):
        restricted = client_for(make_token(["*"], projects=[other_project]))
        before = _ledger()
        assert restricted.get(f"/api/v1/effects/{review.id}/").status_code == 404
        response = restricted.post(
            _resolve_url(review),
            {"outcome": "applied", "request_digest": review.request_digest},
            format="json",
        )
        assert response.status_code == 404
        assert _ledger() == before

    def test_reading_does_not_allow_resolving(self, reader, review):
        before = _ledger()
        response = reader.post(
            _resolve_url(review),
            {"outcome": "applied", "request_digest": review.request_digest},
            format="json",
        )
        assert response.status_code == 403
        assert error_of(response)["details"] == {"required_grant": "effects:resolve"}
        assert _ledger() == before


class TestResolve:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"outcome": "applied"}, "request_digest"),
            ({"outcome": "applied", "request_digest": "ABC"}, "request_digest"),
            ({"outcome": "undone", "request_digest": "0" * 64}, "outcome"),
            ({"request_digest": "0" * 64}, "outcome"),
        ],
    )
    def test_a_bad_body_is_a_400_naming_the_field(self, reviewer, review, body, field):
        before = _ledger()
        response = reviewer.post(_resolve_url(review), body, format="json")
        assert response.status_code == 400
        error = error_of(response)
        assert (error["code"], list(error["details"])) == ("invalid", [field])
        assert _ledger() == before

    def test_the_digest_of_a_changed_request_is_a_409(self, reviewer, review):
        seen = reviewer.get(f"/api/v1/effects/{review.id}/").json()["request_digest"]
        changed = {**review.request, "args": ["attacker@example.com"]}
        EffectRecord.objects.filter(id=review.id).update(
            request=changed, request_digest=digest(changed)
        )
        before = _ledger()
        response = reviewer.post(
            _resolve_url(review), {"outcome": "applied", "request_digest": seen}, format="json"
        )
        assert response.status_code == 409
        error = error_of(response)
        assert (error["code"], error["details"]) == (
            "digest_mismatch",
            {"request_digest": digest(changed)},
        )
        assert _ledger() == before

    def test_applied_with_the_digest_seen_requeues_the_run_with_the_result(self, reviewer, review):
        response = reviewer.post(
            _resolve_url(review),
            {
                "outcome": "applied",
                "result": {"id": "msg-1"},
                "reason": "found it in the outbox",
                "request_digest": review.request_digest,
            },
            format="json",
        )
        assert response.status_code == 200
        body = response.json()
        assert (body["status"], body["resolution"], body["resolution_result"], body["reason"]) == (
            "resolved",
            "applied",
            {"id": "msg-1"},
            "found it in the outbox",
        )
        assert body["resolved_by"].startswith("token:")
        run = Run.objects.get(id=review.run_id)
        assert (run.status, run.review_reason) == ("queued", "")
        event = RunEvent.objects.filter(run=run).latest("seq")
        assert (event.type, event.data["outcome"], event.data["request_digest"]) == (
            "effect.resolved",
            "applied",
            review.request_digest,
        )
        audit = AuditEvent.objects.get(action="effect.resolve")
        assert (audit.outcome, audit.object_id, audit.details["request_digest"]) == (
            "success",
            str(review.id),
            review.request_digest,
        )

    def test_cancel_run_cancels_it(self, reviewer, review):
        response = reviewer.post(
            _resolve_url(review),
            {"outcome": "cancel_run", "request_digest": review.request_digest},
            format="json",
        )
        assert response.status_code == 200
        assert response.json()["resolution"] == "cancel_run"
        assert Run.objects.get(id=review.run_id).status == "cancelled"

    def test_a_second_decision_is_a_409_and_keeps_the_first(self, reviewer, review):
        body = {"outcome": "not_applied", "request_digest": review.request_digest}
        assert reviewer.post(_resolve_url(review), body, format="json").status_code == 200
        before = _ledger()
        again = reviewer.post(
            _resolve_url(review),
            {"outcome": "cancel_run", "request_digest": review.request_digest},
            format="json",
        )
        assert again.status_code == 409
        assert (error_of(again)["code"], error_of(again)["details"]) == (
            "already_resolved",
            {"status": "resolved"},
        )
        assert _ledger() == before
        assert EffectRecord.objects.get(id=review.id).resolution == "not_applied"

    def test_an_effect_that_is_not_waiting_for_review_is_a_409(self, reviewer, project):
        done = EffectRecordFactory(
            run=RunFactory(project=project, status="running"), status="succeeded"
        )
        response = reviewer.post(
            _resolve_url(done),
            {"outcome": "applied", "request_digest": done.request_digest},
            format="json",
        )
        assert response.status_code == 409
        assert error_of(response)["code"] == "illegal_transition"
        assert EffectRecord.objects.get(id=done.id).status == "succeeded"
