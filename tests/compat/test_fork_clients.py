"""Forking through OpenRath's surfaces: ``LocalRuntime.fork`` in-process, and
``RemoteClient.fork_run`` / ``AsyncRemoteClient.fork_run`` against a real server."""

from __future__ import annotations

import asyncio

import pytest

from openrath_project import flow
from openrath_project.errors import ValidationFailed
from openrath_project.runtime import LocalRuntime, RunStatus
from runs_app import services
from runs_app.models import Run, RunFork
from tests.runs_app import conftest as runs_fixtures
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable
from tests.streaming.sse_support import TIMEOUT, uvicorn_server

pytestmark = pytest.mark.django_db(transaction=True)

registry = runs_fixtures.registry


def test_local_runtime_forks_a_run(project):
    runtime = LocalRuntime()
    runtime.register(durable.Linear)
    run = runtime.submit(durable.Linear, state={"who": "ada"})
    done = runtime.run_until_done(run.id, timeout=120)
    assert done.status is RunStatus.SUCCEEDED
    fork = runtime.fork(done.id, 1, state_patch={"who": "bob"}, reason="again as bob")
    assert fork.status is RunStatus.QUEUED
    assert dict(fork.state) == {"who": "bob", "steps": ("one",)}  # the store's frozen view
    finished = runtime.run_until_done(fork.id, timeout=120)
    assert finished.status is RunStatus.SUCCEEDED
    row = Run.objects.get(id=fork.id)
    assert row.output == {"who": "bob", "steps": ["one", "two", "three"], "done": True}
    edge = RunFork.objects.get(child_id=fork.id)
    assert (edge.parent_id, edge.checkpoint_seq, edge.reason) == (done.id, 1, "again as bob")
    with pytest.raises(ValidationFailed):
        runtime.fork(done.id, 9)


def test_remote_clients_fork(registry, project, make_token):
    run, _ = services.run_create(project=project, workflow=registry.get("linear"), state={})
    original = drive(registry, run.id)
    with uvicorn_server() as base:
        with flow.RemoteClient(base, token=make_token(), timeout=TIMEOUT) as client:
            forked = client.fork_run(
                str(original.id), checkpoint=2, state_patch={"who": "eve"}, reason="r"
            )
            listed = client.list_forks(str(original.id))
        assert forked["forked_from"]["run"] == str(original.id)
        assert forked["forked_from"]["checkpoint"] == 2
        assert forked["state"] == {"who": "eve", "steps": ["one", "two"]}
        assert [f["child"] for f in listed] == [forked["id"]]

        token = make_token()

        async def fork_async() -> dict:
            async with flow.AsyncRemoteClient(base, token=token, timeout=TIMEOUT) as c:
                return await c.fork_run(str(original.id), checkpoint=0)

        again = asyncio.run(fork_async())
        assert again["forked_from"]["checkpoint"] == 0
        assert again["next_nodes"] == ["one"]
    assert RunFork.objects.filter(parent=original).count() == 2
    done = drive(registry, Run.objects.get(id=forked["id"]).id)
    assert done.output["steps"] == ["one", "two", "three"]
