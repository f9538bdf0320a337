"""An Idempotency-Key is unique per tenant, but a conflict never reveals (nor replays) a run of
a project the caller cannot see."""

from __future__ import annotations

import pytest

from runs_app.models import Run
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/runs/"


def test_a_conflict_names_no_run_of_another_project(
    registry, project, other_project, make_token, client_for
):
    everywhere = client_for(make_token(["runs:write", "runs:read"]))
    ops_only = client_for(make_token(["runs:write", "runs:read"], projects=[other_project]))
    body = {"workflow": "linear", "project": "research", "state": {"who": "ada"}}
    first = everywhere.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    assert first.status_code == 201
    research_run = first.json()["id"]
    runs = list(Run.objects.values_list("id", "project_id"))
    # The same key for the project the token may use: a 409 that says nothing of the run.
    for state in ({"who": "ada"}, {"who": "bob"}):
        response = ops_only.post(
            URL,
            {"workflow": "linear", "project": "ops", "state": state},
            format="json",
            HTTP_IDEMPOTENCY_KEY="order-1",
        )
        assert response.status_code == 409
        assert error_of(response)["code"] == "idempotency_conflict"
        assert error_of(response)["details"] == {}
        assert research_run not in response.content.decode()
    # A caller who sees the run's project is told which run holds the key.
    other = everywhere.post(
        URL, {**body, "state": {"who": "bob"}}, format="json", HTTP_IDEMPOTENCY_KEY="order-1"
    )
    assert (other.status_code, error_of(other)["details"]) == (409, {"run": research_run})
    # Even a tenant-wide caller asking for another project gets no replay of this run.
    moved = everywhere.post(
        URL, {**body, "project": "ops"}, format="json", HTTP_IDEMPOTENCY_KEY="order-1"
    )
    assert (moved.status_code, error_of(moved)["details"]) == (409, {})
    assert list(Run.objects.values_list("id", "project_id")) == runs
