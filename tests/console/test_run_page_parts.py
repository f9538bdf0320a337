"""The run page's plan states, step panels and waterfall as the server renders them (issue 19,
build item 2): what a reload, with or without JavaScript, shows."""

from __future__ import annotations

import re

from openrath_project.console import views
from runs_app.interrupts import interrupt_resolve
from tests.console.conftest import start
from tests.console.test_pages import _main
from tests.runs_app.conftest import drive


def test_node_states():
    state = views.node_state
    base = {
        "latest_event": "",
        "checkpointed": False,
        "waiting": False,
        "running": False,
        "upcoming": False,
        "run_failed": False,
    }
    assert state("s", **base) == "not-reached"
    assert state("s", **{**base, "upcoming": True}) == "next"
    assert state("s", **{**base, "checkpointed": True}) == "done"
    assert state("s", **{**base, "checkpointed": True, "running": True}) == "running"
    assert state("s", **{**base, "waiting": True, "upcoming": True}) == "waiting"
    assert state("s", **{**base, "latest_event": "step.retry_scheduled"}) == "retrying"
    retried_out = {**base, "latest_event": "step.retry_scheduled", "run_failed": True}
    assert state("s", **retried_out) == "failed"
    assert state("s", **{**base, "latest_event": "run.failed", "run_failed": True}) == "failed"
    # Every state has its words and its mark (colour is not the only signal).
    assert set(views.NODE_STATE_LABELS) == set(views.NODE_STATE_MARKS)


def test_a_finished_run_shows_each_steps_checkpoint_delta_chunks_and_its_waterfall(
    transactional_db, login, registry, project
):
    run = drive(registry, start(registry, project, "console_approval", {}).id)
    interrupt = run.interrupts.get()
    interrupt_resolve(
        interrupt=interrupt,
        decision="approve",
        response={"note": "ok"},
        request_digest=interrupt.request_digest,
        actor="user:alice",
    )
    run = drive(registry, run.id)
    assert run.status == "succeeded"
    main = _main(login("viewer").get(f"/console/runs/{run.id}/"))
    states = re.findall(r'data-node="(\w+)" data-state="([\w-]+)"', main)
    assert states == [("review", "done"), ("publish", "done")]

    def panel(step: str) -> str:
        found = re.search(
            rf'<section class="card step-events"[^>]*data-step="{step}"(.*?)</section>', main, re.S
        )
        assert found is not None
        return found.group(1)

    review, publish = panel("review"), panel("publish")
    assert '<span class="node-state state-done">✓ done (checkpointed)</span>' in review
    assert "<p>#1 of this run · attempt 1" in review
    assert "State stored in full (a keyframe)" in review
    assert '<div class="text">Drafted release notes for 1.2</div>' in review
    assert "approve by user:alice" in review
    assert "<p>#2 of this run · attempt 1" in publish
    assert "What it changed (state delta)" in publish
    delta = re.search(r'<pre class="json state-delta">(.*?)</pre>', publish, re.S).group(1)
    assert "&quot;published&quot;: true" in delta
    assert "&quot;approved&quot;" not in delta  # only what the step changed
    assert "No chunks from this step." in publish
    spans = re.findall(
        r'<g class="span span-(\w+)" data-kind="\w+" data-lane="run" data-step="(\w*)"', main
    )
    assert spans == [
        ("step", "review"),
        ("interrupt", "review"),
        ("step", "review"),
        ("step", "publish"),
    ]
    assert ">‖ review: Ship relea…<" in main  # a label of 19 characters, the rest in the title
