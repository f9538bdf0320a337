"""The effects page lists every effect in scope (not only those waiting for a review), with
filters from the query string, ``needs_review`` first, paginated; another tenant's effects
never show (issue 19, item 4)."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from effects_app.models import EffectRecord
from openrath_project.console import views
from runs_app.models import Run
from tests.console.conftest import start

pytestmark = pytest.mark.django_db(transaction=True)

#: The ledger fixture's effects of its first run, newest first.
NEWEST_FIRST = ["resolved", "failed", "succeeded", "started", "prepared"]


def _listed(response) -> list[str]:
    assert response.status_code == 200
    return re.findall(r'data-effect="([0-9a-f-]+)"', response.content.decode())


def _effect(run: Run, key: str, status: str, **fields) -> EffectRecord:
    return EffectRecord.objects.create(
        tenant_id=run.tenant_id,
        project_id=run.project_id,
        run=run,
        step=fields.pop("step", "send"),
        key=key,
        idempotency_key=f"idem-{run.id.hex[:8]}-{key}",
        effect_class=fields.pop("effect_class", "non_idempotent"),
        request={"to": key},
        request_digest="d" * 64,
        status=status,
        **fields,
    )


@pytest.fixture
def ledger(registry, project):
    """A run with an effect in every status but ``needs_review``, and a second run whose
    effect waits for a review (made last, so newest-first alone would not put it first)."""
    run = start(registry, project, "console_effect", {"to": "a@example.com"})
    effects = {
        "prepared": _effect(run, "prep", "prepared", step="draft", effect_class="idempotent"),
        "started": _effect(run, "start", "started"),
        "succeeded": _effect(run, "ok", "succeeded", result={"sent": "ok"}, attempts=1),
        "failed": _effect(run, "bad", "failed", error={"message": "smtp down"}, attempts=3),
        "resolved": _effect(
            run,
            "done",
            "resolved",
            resolution="applied",
            resolution_result={"sent": "by hand"},
            resolved_by="user:alice",
            resolved_at=timezone.now(),
            reason="found it in the outbox",
        ),
    }
    other_run = start(registry, project, "console_effect", {"to": "b@example.com"})
    effects["needs_review"] = _effect(other_run, "review", "needs_review", reason="ambiguous")
    return run, other_run, effects


def test_every_status_is_listed_waiting_ones_first(login, ledger):
    run, _other, effects = ledger
    ids = _listed(login("viewer").get("/console/effects/"))
    assert ids[0] == str(effects["needs_review"].id)
    assert sorted(ids) == sorted(str(e.id) for e in effects.values())
    # After the waiting one: newest first.
    rest = [str(e.id) for e in sorted(effects.values(), key=lambda e: e.id, reverse=True)]
    rest.remove(str(effects["needs_review"].id))
    assert ids[1:] == rest


def test_each_row_shows_request_result_attempts_key_and_resolution(login, ledger):
    _run, _other, effects = ledger
    body = login("operator").get("/console/effects/").content.decode()
    done = effects["resolved"]
    assert done.idempotency_key in body
    assert "Resolved <strong>applied</strong> by user:alice at " in body
    assert "found it in the outbox" in body
    assert "by hand" in body  # the result the operator gave
    assert "&quot;sent&quot;: &quot;ok&quot;" in body  # a succeeded effect's result
    assert "smtp down" in body
    assert "3 attempts" in body
    # The review form is there for the waiting effect only.
    assert body.count('name="outcome" value="applied"') == 1
    waiting = effects["needs_review"].id
    form_at = body.index(f'action="/console/effects/{waiting}/resolve/"')
    assert body.rfind('data-effect="', 0, form_at) == body.index(f'data-effect="{waiting}"')


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=failed", ["failed"]),
        ("status=needs_review", ["needs_review"]),
        ("class=idempotent", ["prepared"]),
        ("step=draft", ["prepared"]),
        ("status=succeeded&class=non_idempotent", ["succeeded"]),
        ("status=bogus", ["needs_review", *NEWEST_FIRST]),
        ("step=nowhere", []),
    ],
)
def test_filters(login, ledger, query, expected):
    _run, _other, effects = ledger
    ids = _listed(login("viewer").get(f"/console/effects/?{query}"))
    assert ids == [str(effects[name].id) for name in expected]


def test_the_run_filter(login, ledger):
    run, other, effects = ledger
    client = login("viewer")
    mine = _listed(client.get(f"/console/effects/?run={run.id}"))
    assert sorted(mine) == sorted(str(e.id) for k, e in effects.items() if k != "needs_review")
    assert _listed(client.get(f"/console/effects/?run={other.id}")) == [
        str(effects["needs_review"].id)
    ]
    empty = client.get("/console/effects/?step=nowhere").content.decode()
    assert "No effect matches these filters." in empty


def test_pages_keep_the_filters(login, ledger, monkeypatch):
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    run, _other, effects = ledger
    client = login("viewer")
    first = client.get(f"/console/effects/?run={run.id}")
    body = first.content.decode()
    assert len(_listed(first)) == 2
    assert f'href="?run={run.id}&amp;page=2"' in body
    seen = []
    for number in (1, 2, 3):
        seen += _listed(client.get(f"/console/effects/?run={run.id}&page={number}"))
    assert sorted(seen) == sorted(str(e.id) for k, e in effects.items() if k != "needs_review")


def test_another_tenants_effects_are_absent(login, ledger, registry, foreign_project):
    foreign_run = start(registry, foreign_project, "console_effect", {"to": "x@globex.test"})
    foreign = [
        _effect(foreign_run, "theirs", "needs_review"),
        _effect(foreign_run, "their-ok", "succeeded"),
    ]
    client = login("viewer")
    for query in ("", "status=needs_review", f"run={foreign_run.id}", "step=send"):
        ids = _listed(client.get(f"/console/effects/?{query}"))
        assert not {str(e.id) for e in foreign} & set(ids), query
    assert _listed(client.get(f"/console/effects/?run={foreign_run.id}")) == []


def test_a_resolution_returns_to_the_filtered_list(login, needs_review):
    run, effect = needs_review()
    client = login("operator")
    listed = f"/console/effects/?run={run.id}&status=needs_review"
    body = client.get(listed).content.decode()
    assert f'name="next" value="/console/effects/?run={run.id}&amp;status=needs_review"' in body
    refused = client.post(
        f"/console/effects/{effect.id}/resolve/",
        {"outcome": "applied", "request_digest": effect.request_digest, "result": "{nope"},
    )
    assert refused.status_code == 400
    assert 'name="next" value="/console/effects/"' in refused.content.decode()
    done = client.post(
        f"/console/effects/{effect.id}/resolve/",
        {"outcome": "not_applied", "request_digest": effect.request_digest, "next": listed},
    )
    assert (done.status_code, done["Location"]) == (302, listed)
