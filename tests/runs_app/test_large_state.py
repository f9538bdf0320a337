"""Large state values live in the artifact store: checkpoints stay small, steps see them whole,
the API serves them by digest to readers of the run (and to no one else)."""

from __future__ import annotations

import hashlib
import json

import pytest

from openrath_project import large_values
from openrath_project.artifacts import ArtifactCorrupted
from runs_app import services
from runs_app.models import Checkpoint, Run
from tests.runs_app.conftest import drive
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)

SIZE = 200_000  # over the 64 KiB default inline limit


@pytest.fixture(autouse=True)
def _local_artifacts(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "artifacts")},
        },
    }


def test_large_values_are_references_in_checkpoints_and_whole_in_steps(registry, project, tmp_path):
    run, _ = services.run_create(
        project=project, workflow=registry.get("large_state"), state={"size": SIZE}
    )
    done = drive(registry, run.id)
    assert done.status == "succeeded", done.error
    output = done.output
    # The steps saw the whole values: the join read both branches' parts and the document.
    assert output["doc_length"] == SIZE + 1
    assert output["parts"] == {"left": "L", "right": "R"}
    assert large_values.is_ref(output["doc"])
    digest = output["doc"]["$artifact"]["digest"]
    expected = json.dumps("d" * SIZE + "!", ensure_ascii=False).encode()
    assert digest == hashlib.sha256(expected).hexdigest()
    assert output["doc"]["$artifact"]["size"] == len(expected)
    # Every checkpoint of the parent and its branches is small: references, not megabytes.
    sizes = [
        len(json.dumps(state))
        for state in Checkpoint.objects.filter(run__in=Run.objects.all()).values_list(
            "state", flat=True
        )
    ]
    assert sizes
    assert max(sizes) < 4096, sizes
    # A value carried unchanged from step to step and into both branches is stored once
    # (content addressing): the document, the document with "!", and each branch's part.
    stored = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    assert len(stored) == 4, stored
    assert large_values.hydrate(project.tenant_id, output)["doc"] == "d" * SIZE + "!"


def test_small_states_are_left_alone(registry, project):
    state = {"a": "x" * 1000, "b": [1, 2, 3]}
    assert large_values.offload(project.tenant_id, state) is state


def test_the_api_serves_a_referenced_value_to_readers_of_the_run_only(
    registry, project, other_project, other_tenant, make_token, client_for
):
    run, _ = services.run_create(
        project=project, workflow=registry.get("large_state"), state={"size": SIZE}
    )
    done = drive(registry, run.id)
    digest = done.output["doc"]["$artifact"]["digest"]
    url = f"/api/v1/runs/{run.id}/artifacts/{digest}/"

    reader = client_for(make_token(["runs:read"]))
    response = reader.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == "d" * SIZE + "!"
    # A digest from a branch's checkpoint (set in a delta) is readable through the run too.
    left = Run.objects.get(parent=done, branch="left")
    part = next(
        d
        for state in Checkpoint.objects.filter(run=left).values_list("state", flat=True)
        for d in _digests(state)
    )
    assert reader.get(f"/api/v1/runs/{left.id}/artifacts/{part}/").status_code == 200

    # A digest the run does not refer to, another project's token, another tenant: 404.
    other = hashlib.sha256(b"something else").hexdigest()
    assert error_of(reader.get(f"/api/v1/runs/{run.id}/artifacts/{other}/"))["code"] == (
        "not_found"
    )
    assert client_for(make_token(["runs:read"], projects=[other_project])).get(url).status_code == (
        404
    )
    foreign = client_for(make_token(["*"], tenant=other_tenant))
    assert foreign.get(url).status_code == 404
    # No grant to read runs: 403; a malformed digest is not a route.
    assert client_for(make_token(["sessions:read"])).get(url).status_code == 403
    assert reader.get(f"/api/v1/runs/{run.id}/artifacts/NOT-A-DIGEST/").status_code == 404


def _digests(value):
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "digest" and isinstance(item, str) and len(item) == 64:
                yield item
            else:
                yield from _digests(item)
    elif isinstance(value, list):
        for item in value:
            yield from _digests(item)


def test_a_corrupted_artifact_is_refused_on_read(registry, project, settings, tmp_path):
    settings.OPENRATH_STATE_INLINE_BYTES = 1024
    run, _ = services.run_create(
        project=project, workflow=registry.get("large_state"), state={"size": 5000}
    )
    drive(registry, run.id, until=("succeeded", "failed"))
    done = Run.objects.get(id=run.id)
    assert done.status == "succeeded"
    # Tamper with the stored document: reading it back refuses the bad bytes.
    stored = next((tmp_path / "artifacts").rglob(done.output["doc"]["$artifact"]["digest"]))
    stored.write_bytes(stored.read_bytes().replace(b"d", b"e"))
    with pytest.raises(ArtifactCorrupted):
        large_values.hydrate(project.tenant_id, done.output)
