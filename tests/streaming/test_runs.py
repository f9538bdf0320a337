"""The run stream: every event once, in order, and the run's status after the event that set it.

The run executes on another thread through ``runs_app.executor.run_one`` (the ``drive`` helper
of the runs tests), against PostgreSQL's one-statement claim and step commit.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from runs_app import services as run_services
from runs_app.models import RunEvent
from tests.runs_app.conftest import drive
from tests.streaming.conftest import TIMEOUT, bearer, in_thread, open_stream, receive_until_ready

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_client_sees_every_event_once_in_order_and_the_final_status(
    registry, project, make_token
):
    run, _ = run_services.run_create(
        project=project, workflow=registry.get("linear"), state={"who": "ada"}, user_message="go"
    )
    raw = make_token(["runs:read"])

    async def scenario():
        communicator, accepted, _ = await open_stream(f"/ws/runs/{run.id}/", headers=bearer(raw))
        assert accepted
        backfill = await receive_until_ready(communicator)
        await in_thread(lambda: drive(registry, run.id))
        live = []
        while True:
            message = await communicator.receive_json_from(timeout=TIMEOUT)
            live.append(message)
            if message["type"] == "run" and message["run"]["status"] == "succeeded":
                break
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return backfill, live

    backfill, live = async_to_sync(scenario)()
    assert backfill[0]["type"] == "event"
    assert backfill[0]["event"]["seq"] == 1
    assert backfill[0]["event"]["type"] == "run.created"
    assert set(backfill[0]["event"]) == {"seq", "type", "step", "data", "created_at"}
    assert backfill[1:] == [
        {
            "type": "run",
            "run": {"id": str(run.id), "status": "queued", "next_nodes": ["one"], "error": None},
        },
        {"type": "ready", "after": 1},
    ]
    events = [m["event"] for m in live if m["type"] == "event"]
    stored = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type"))
    assert [(e["seq"], e["type"]) for e in events] == stored[1:]
    assert [e["type"] for e in events] == [
        "run.claimed",
        "step.completed",
        "step.completed",
        "step.completed",
        "run.succeeded",
    ]
    statuses = [m["run"]["status"] for m in live if m["type"] == "run"]
    # The run message follows the event that changed the status (commits that land between two
    # reads may collapse into one message, so "running" may or may not be seen on its own).
    assert statuses[-1] == "succeeded"
    assert set(statuses) <= {"running", "succeeded"}
    assert live[-1] == {
        "type": "run",
        "run": {"id": str(run.id), "status": "succeeded", "next_nodes": [], "error": None},
    }
    assert live[-2]["type"] == "event"
    assert live[-2]["event"]["type"] == "run.succeeded"


def test_reconnecting_to_a_finished_run_replays_from_after(registry, project, make_token):
    run, _ = run_services.run_create(
        project=project, workflow=registry.get("linear"), state={}, user_message="go"
    )
    drive(registry, run.id)
    raw = make_token(["runs:read"])

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/runs/{run.id}/?after=4", headers=bearer(raw))
        got = await receive_until_ready(communicator)
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert [(m["type"], m.get("event", {}).get("seq")) for m in got] == [
        ("event", 5),
        ("event", 6),
        ("run", None),
        ("ready", None),
    ]
    assert got[2]["run"]["status"] == "succeeded"
    assert got[3] == {"type": "ready", "after": 6}
