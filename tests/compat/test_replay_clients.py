"""Replay through OpenRath's surfaces: ``LocalRuntime.replay`` in-process, and
``RemoteClient.replay_run`` / ``AsyncRemoteClient.replay_run`` against a real server."""

from __future__ import annotations

import asyncio

import pytest

from openrath_project import flow
from openrath_project.errors import Conflict
from openrath_project.runtime import LocalRuntime, RunStatus
from runs_app import services
from runs_app.models import Run
from tests.runs_app import conftest as runs_fixtures
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable
from tests.streaming.sse_support import TIMEOUT, uvicorn_server

pytestmark = pytest.mark.django_db(transaction=True)

registry = runs_fixtures.registry


def test_local_runtime_replays_a_finished_run(project):
    runtime = LocalRuntime()
    runtime.register(durable.Linear)
    run = runtime.submit(durable.Linear, state={"who": "ada"})
    done = runtime.run_until_done(run.id, timeout=120)
    assert done.status is RunStatus.SUCCEEDED
    replay = runtime.replay(done.id)
    assert replay.status is RunStatus.SUCCEEDED
    assert replay.output["identical"] is True
    assert replay.output["steps_replayed"] == 3
    row = Run.objects.get(id=replay.id)
    assert (row.kind, row.replay_of_id, row.created_by) == ("replay", done.id, "local")


def test_local_runtime_refuses_an_unfinished_run(project):
    runtime = LocalRuntime()
    runtime.register(durable.Linear)
    run = runtime.submit(durable.Linear)
    with pytest.raises(Conflict):
        runtime.replay(run.id)


def test_remote_clients_replay(registry, project, make_token):
    run, _ = services.run_create(project=project, workflow=registry.get("linear"))
    original = drive(registry, run.id)
    with uvicorn_server() as base:
        with flow.RemoteClient(base, token=make_token(), timeout=TIMEOUT) as client:
            replay = client.replay_run(str(original.id))
        assert (replay["kind"], replay["replay_of"]) == ("replay", str(original.id))
        assert replay["output"]["identical"] is True

        raw = make_token()

        async def replay_async() -> dict:
            async with flow.AsyncRemoteClient(base, token=raw, timeout=TIMEOUT) as c:
                return await c.replay_run(str(original.id))

        again = asyncio.run(replay_async())
        assert again["output"]["identical"] is True
        assert again["id"] != replay["id"]
    assert Run.objects.filter(kind="replay", replay_of=original).count() == 2
