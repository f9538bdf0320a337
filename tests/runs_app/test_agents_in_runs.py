"""An agent inside a durable step: its writing tools go through the effect ledger, and a
retried step reuses what was recorded instead of writing twice."""

from __future__ import annotations

import pytest

from effects_app.models import EffectRecord
from runs_app import services
from sessions_app.models import LineageEdge
from sessions_app.selectors import chunk_all
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable

pytestmark = pytest.mark.django_db(transaction=True)


def test_writing_tool_runs_once_across_a_retry(registry, project):
    durable.APPENDED.clear()
    run, _ = services.run_create(
        project=project, workflow=registry.get("agent_step"), user_message="write hello"
    )
    first_session = run.session_id
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert durable.APPENDED == ["hello"]  # the step ran twice, the write happened once
    effect = EffectRecord.objects.get(run=done)
    assert effect.key.startswith("tool:append_line:")
    assert effect.key.endswith(":1")
    assert (effect.status, effect.attempts) == ("succeeded", 1)
    assert effect.request["args"] == ["append_line", '{"line": "hello"}']
    view = [(c.role, c.kind, c.agent) for c in chunk_all(done.session_id)]
    assert view == [
        ("user", "message", ""),
        ("assistant", "tool_call", "writer"),
        ("tool", "tool_result", "writer"),
        ("assistant", "message", "writer"),
    ]
    result = chunk_all(done.session_id)[2]
    assert result.content["output"] == {"ok": True, "lines": 1}
    # the abandoned first attempt is kept, on the session the retry forked away from
    assert done.session_id != first_session
    edge = LineageEdge.objects.get(child_id=done.session_id)
    assert (edge.parent_id, edge.op, edge.parent_len) == (first_session, "fork", 1)
    assert len(chunk_all(first_session)) == 4
