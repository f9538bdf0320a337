"""Artifacts no kept row mentions are deleted after the grace; referenced ones (also by
another project of the tenant) and young ones stay. On SeaweedFS (S3) and local files."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.files.storage import Storage
from django.utils import timezone

from openrath_project.artifacts import artifact_exists, artifact_put
from openrath_project.tenancy.models import Project
from retention_app import services
from runs_app.models import Run
from tests.artifacts.conftest import local_storage, s3_storage, seaweed, storage  # noqa: F401
from tests.retention_app.conftest import NOW, World

pytestmark = pytest.mark.django_db


def _ref(digest: str, size: int) -> dict[str, object]:
    return {"$artifact": {"digest": digest, "size": size, "media_type": "application/json"}}


def test_unreferenced_artifacts_go_and_referenced_ones_stay(
    storage: Storage,  # noqa: F811
    project: Project,
    other_project: Project,
) -> None:
    tenant = project.tenant_id
    kept = artifact_put(tenant_id=tenant, data=b'"kept by a young run"')
    dropped = artifact_put(tenant_id=tenant, data=b'"only an old run had it"')
    loose = artifact_put(tenant_id=tenant, data=b'"nobody"')
    elsewhere = artifact_put(tenant_id=tenant, data=b'"another project has it"')
    world, other = World(project), World(other_project)
    young = world.run(age=timedelta(days=1))
    old = world.run(age=timedelta(days=300))
    Run.objects.unscoped().filter(id=young.id).update(state={"doc": _ref(kept.digest, kept.size)})
    Run.objects.unscoped().filter(id=old.id).update(
        output={"doc": _ref(dropped.digest, dropped.size)}
    )
    foreign = other.run(age=timedelta(days=1))
    Run.objects.unscoped().filter(id=foreign.id).update(
        input={"doc": _ref(elsewhere.digest, elsewhere.size)}
    )
    policy = services.policy_create(
        project=project,
        created_by="t",
        runs_max_age_seconds=30 * 86400,
        artifacts_grace_seconds=3600,
    )
    forecast = services.retention_dry_run(policy=policy, now=NOW)
    # Before the pass the old run still mentions its artifact: only the loose one is forecast.
    assert forecast.removed["artifacts"] == {"count": 1, "bytes": loose.size}
    assert artifact_exists(tenant_id=tenant, digest=loose.digest)
    report = services.retention_apply(policy=policy, trigger="command", now=NOW)
    assert report.removed["artifacts"] == {"count": 2, "bytes": dropped.size + loose.size}
    assert artifact_exists(tenant_id=tenant, digest=kept.digest)
    assert artifact_exists(tenant_id=tenant, digest=elsewhere.digest)
    assert not artifact_exists(tenant_id=tenant, digest=dropped.digest)
    assert not artifact_exists(tenant_id=tenant, digest=loose.digest)


def test_an_artifact_younger_than_the_grace_stays(
    storage: Storage,  # noqa: F811
    project: Project,
) -> None:
    """What a step still running wrote is not referenced yet: the grace keeps it."""
    fresh = artifact_put(tenant_id=project.tenant_id, data=b'"written by a running step"')
    policy = services.policy_create(project=project, created_by="t", artifacts_grace_seconds=3600)
    report = services.retention_apply(policy=policy, trigger="command", now=timezone.now())
    assert report.removed["artifacts"]["count"] == 0
    assert artifact_exists(tenant_id=project.tenant_id, digest=fresh.digest)
