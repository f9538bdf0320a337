"""``manage.py retention``: a dry run changes nothing; a run applies the policies."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from retention_app import services
from retention_app.models import RetentionPass
from runs_app.models import Run
from tests.retention_app.conftest import World

pytestmark = pytest.mark.django_db


def _call(*args: str) -> list[str]:
    out = StringIO()
    call_command("retention", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_dry_run_then_apply(project) -> None:
    world = World(project)
    old = world.run()
    Run.objects.unscoped().filter(id=old.id).update(
        created_at=timezone.now() - timezone.timedelta(days=90),
        finished_at=timezone.now() - timezone.timedelta(days=90),
    )
    services.policy_create(project=project, created_by="t", runs_max_age_seconds=86400)
    lines = _call("--dry-run", "--tenant", "acme", "--project", "research")
    report = json.loads(lines[0])
    assert (report["dry_run"], report["removed"]["runs"]["count"]) == (True, 1)
    assert lines[-1].startswith("retention over 1 project(s): would remove ")
    assert "1 runs" in lines[-1]
    assert Run.objects.unscoped().filter(id=old.id).exists()
    assert not RetentionPass.objects.unscoped().exists()

    lines = _call()
    assert json.loads(lines[0])["removed"]["runs"]["count"] == 1
    assert "removed" in lines[-1]
    assert "1 runs" in lines[-1]
    assert not Run.objects.unscoped().filter(id=old.id).exists()
    assert RetentionPass.objects.unscoped().get().trigger == "command"


def test_a_project_without_a_policy_is_a_readable_error(project) -> None:
    with pytest.raises(CommandError, match="has no retention policy"):
        _call("--tenant", "acme", "--project", "research")
    with pytest.raises(CommandError, match="needs --tenant"):
        _call("--project", "research")
