"""Run ids are time-ordered (uuid7), so ``GET /api/v1/runs/`` pages newest first.

The list pages by ``-id``; with random ids (uuid4) the order would be arbitrary. Runs made over the
API and the branch runs a fan-out makes both get their ids from ``openrath_project.ids.uuid7``.
"""

from __future__ import annotations

import uuid

import pytest

from runs_app.models import Run
from tests.runs_app.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)


def _pages(client, url: str, limit: int) -> list[list[str]]:
    pages: list[list[str]] = []
    response = client.get(url, {"limit": limit})
    while True:
        assert response.status_code == 200, response.content[:300]
        body = response.json()
        pages.append([item["id"] for item in body["results"]])
        if body["next"] is None:
            return pages
        response = client.get(body["next"])


def test_runs_list_newest_first_across_pages(registry, project, make_token, client_for):
    client = client_for(make_token(["runs:read", "runs:write"]))
    created: list[str] = []
    # A fan-out run first: driving it makes its two branch runs (children) after it.
    response = client.post(
        "/api/v1/runs/", {"workflow": "parallel", "project": "research"}, format="json"
    )
    assert response.status_code == 201, response.content[:300]
    parent_id = response.json()["id"]
    created.append(parent_id)
    assert drive(registry, uuid.UUID(parent_id)).status == "succeeded"
    # fanout_start makes the branches in the router's order: left, then right.
    assert Run.objects.filter(parent_id=parent_id).count() == 2
    for branch in ("left", "right"):
        created.append(str(Run.objects.get(parent_id=parent_id, branch=branch).id))
    for n in range(6):
        response = client.post(
            "/api/v1/runs/",
            {"workflow": "linear", "project": "research", "state": {"n": n}},
            format="json",
        )
        assert response.status_code == 201, response.content[:300]
        created.append(response.json()["id"])

    pages = _pages(client, "/api/v1/runs/", limit=4)
    assert [len(page) for page in pages] == [4, 4, 1]
    assert [run_id for page in pages for run_id in page] == created[::-1]
    assert all(uuid.UUID(run_id).version == 7 for run_id in created), created
    assert Run.objects.count() == 9
