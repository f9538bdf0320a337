"""A local artifact is on disk before the commit that references it (issue 20, item 4): its
bytes and the directory entries leading to it are fsynced inside ``artifact_put``, so a
checkpoint that commits a reference never points at a file a power cut could take back.

What is observed is the real ``os.fsync`` (wrapped to note which file each call was for), in
the order it happens relative to the step's commit. A power cut itself cannot be simulated on
this machine (no device-mapper or fault-injecting block device in the sandbox).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from openrath_project import large_values
from openrath_project.artifacts import artifact_key, artifact_put
from runs_app import services
from tests.runs_app.conftest import drive


@pytest.fixture
def fsynced(monkeypatch) -> list[tuple[str, str]]:
    """Every fsync from now on, as ("fsync", the path it was for), in order."""
    calls: list[tuple[str, str]] = []
    real = os.fsync

    def fsync(descriptor: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        real(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_local_artifact_and_its_directories_are_fsynced(local_storage, fsynced):
    tenant = uuid.uuid4()
    ref = artifact_put(tenant_id=tenant, data=b"durable bytes")
    root = Path(local_storage.path("")).resolve()
    path = Path(local_storage.path(artifact_key(tenant_id=tenant, digest=ref.digest))).resolve()
    chain = [path, *path.parents]
    expected = [str(each) for each in chain[: chain.index(root) + 1]]
    assert len(expected) == 5  # the file, its prefix, tenant and artifacts directories, the root
    assert [where for _, where in fsynced] == expected
    # Put again (deduplicated): made durable again, in case the first put died before it could.
    fsynced.clear()
    artifact_put(tenant_id=tenant, data=b"durable bytes")
    assert [where for _, where in fsynced] == expected


def test_s3_needs_no_fsync(s3_storage, fsynced):
    artifact_put(tenant_id=uuid.uuid4(), data=b"acknowledged by the server")
    assert fsynced == []


@pytest.mark.django_db(transaction=True)
def test_every_artifact_a_checkpoint_refers_to_was_fsynced_before_the_commit(
    registry, project, local_storage, fsynced, monkeypatch, settings
):
    settings.OPENRATH_STATE_INLINE_BYTES = 1024
    events = fsynced  # commits are noted in the same list, so the order is the real one
    real_commit = services.checkpoint_commit

    def noted_commit(*, claim, commit: services.StepCommit, **kwargs):
        seq = real_commit(claim=claim, commit=commit, **kwargs)
        events.extend(("commit", digest) for digest in _digests(commit.state))
        return seq

    monkeypatch.setattr(services, "checkpoint_commit", noted_commit)
    run, _ = services.run_create(
        project=project, workflow=registry.get("large_state"), state={"size": 5000}
    )
    done = drive(registry, run.id)
    assert done.status == "succeeded", done.error
    committed = [(index, digest) for index, (kind, digest) in enumerate(events) if kind == "commit"]
    assert committed, "the run stored large values as artifacts"
    for index, digest in committed:
        synced_before = [where for kind, where in events[:index] if kind == "fsync"]
        assert any(where.endswith(digest) for where in synced_before), digest
    assert large_values.hydrate(project.tenant_id, done.output)["doc_length"] == 5001


def _digests(value):
    if isinstance(value, dict):
        ref = value.get("$artifact")
        if isinstance(ref, dict):
            if "digest" in ref:
                yield ref["digest"]
            for block in ref.get("blocks", ()):
                yield block["digest"]
        for item in value.values():
            yield from _digests(item)
    elif isinstance(value, list):
        for item in value:
            yield from _digests(item)
