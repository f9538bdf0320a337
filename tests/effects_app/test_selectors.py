"""effects_app.selectors: the ledger a principal may read (its tenant, its projects, no
selector decisions) and the single effect it may open (a 404 otherwise)."""

from __future__ import annotations

import uuid

import pytest

from effects_app import selectors
from openrath_project.errors import NotFound
from tests.factories import principal_for
from tests.factories.effects import EffectRecordFactory
from tests.factories.runs import RunFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(project, other_project, foreign_project):
    """Effects in two projects of acme, one selector decision, and one of another tenant."""
    run = RunFactory(project=project, status="needs_review")
    return {
        "first": EffectRecordFactory(run=run),
        "second": EffectRecordFactory(run=run, status="succeeded", result={"sent": True}),
        "ops": EffectRecordFactory(run=RunFactory(project=other_project, status="needs_review")),
        "decision": EffectRecordFactory(run=run, effect_class="decision", status="succeeded"),
        "foreign": EffectRecordFactory(
            run=RunFactory(project=foreign_project, status="needs_review")
        ),
    }


def test_the_list_is_the_tenants_ledger_without_decisions_newest_first(tenant, ledger):
    listed = list(selectors.effect_list(principal=principal_for(tenant)).order_by("-id"))
    assert listed == [ledger["ops"], ledger["second"], ledger["first"]]


def test_a_project_restricted_principal_sees_its_projects_only(tenant, project, ledger):
    principal = principal_for(tenant, projects=[project])
    assert set(selectors.effect_list(principal=principal)) == {ledger["first"], ledger["second"]}


def test_another_tenant_sees_none_of_it(other_tenant, ledger):
    assert list(selectors.effect_list(principal=principal_for(other_tenant))) == [ledger["foreign"]]


def test_get_returns_an_effect_in_scope(tenant, ledger):
    found = selectors.effect_get(principal=principal_for(tenant), effect_id=str(ledger["first"].id))
    assert found == ledger["first"]
    assert (found.status, found.request_digest) == ("needs_review", ledger["first"].request_digest)


@pytest.mark.parametrize(
    ("who", "target"),
    [
        ("tenant", "foreign"),  # another tenant's effect
        ("tenant", "decision"),  # a selector decision is not a reviewable effect
        ("restricted", "ops"),  # a project outside a restricted principal's scope
    ],
)
def test_get_outside_the_scope_is_not_found(who, target, tenant, project, ledger):
    principal = principal_for(tenant, projects=[project] if who == "restricted" else None)
    with pytest.raises(NotFound) as caught:
        selectors.effect_get(principal=principal, effect_id=ledger[target].id)
    assert caught.value.details == {"effect": str(ledger[target].id)}


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", str(uuid.UUID(int=0)), 42])
def test_get_of_a_malformed_or_unknown_id_is_not_found(tenant, ledger, bad_id):
    with pytest.raises(NotFound) as caught:
        selectors.effect_get(principal=principal_for(tenant), effect_id=bad_id)
    assert caught.value.details == {"effect": str(bad_id)}
