"""The console's graphs in a real browser (issue 19, items 2 and 3): the lineage graph of a
fan-out run is coloured by agent with a legend naming each one and no overlapping labels; the
plan graph marks the branch steps checkpointed once the branches succeeded, and a click on a
node shows that step's events."""

from __future__ import annotations

from typing import Any

import pytest

from runs_app.models import Run
from runs_app.services import run_create
from tests.browser.conftest import log_in, require_console_assets
from tests.browser.test_console import member, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

FANOUT_AGENTS = ["market-analyst", "planner", "reviewer", "technology-analyst"]


def finished_fanout(browser_registry: Any, project: Any) -> Run:
    run, _ = run_create(project=project, workflow=browser_registry.get("browser_fanout"), state={})
    wait_until(
        lambda: Run.objects.get(id=run.id).status == "succeeded",
        timeout=30,
        what="the fan-out run to succeed",
    )
    return Run.objects.select_related("session").get(id=run.id)


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["x1"] < b["x2"] and b["x1"] < a["x2"] and a["y1"] < b["y2"] and b["y1"] < a["y2"]


def test_the_lineage_of_a_fanout_is_coloured_by_agent_without_overlaps(
    browser_context, page, acme, browser_registry
):
    require_console_assets()
    _tenant, project = acme
    run = finished_fanout(browser_registry, project)
    username = member(acme[0], "viewer")
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, username, "a-long-browser-password")
    page.goto(f"/console/sessions/{run.session_id}/lineage/")
    page.wait_for_function(
        "() => window.openrathLineage && window.openrathLineage.cy.nodes().length > 3"
    )

    legend = page.locator("#legend-agents .legend-agent").evaluate_all(
        "items => items.map(item => item.dataset.agent)"
    )
    assert [a for a in legend if a != "(no agent)"] == FANOUT_AGENTS
    nodes: list[dict[str, Any]] = page.evaluate(
        """() => window.openrathLineage.cy.nodes().map(node => ({
            agent: node.data('agent'), agents: node.data('agents'), label: node.data('label'),
            color: node.data('color'), box: node.renderedBoundingBox({includeLabels: true})}))"""
    )
    dominant = {node["agent"] for node in nodes}
    # Each branch session is its analyst's; the root is the planner's; the merge the reviewer's.
    assert set(FANOUT_AGENTS) <= dominant, nodes
    for node in nodes:
        assert node["agent"] in node["label"]  # colour is not the only signal
    colors = {node["agent"]: node["color"] for node in nodes}
    assert len(set(colors.values())) == len(colors)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            assert not overlaps(a["box"], b["box"]), (a["label"], b["label"])
    # Edge labels sit on their edges' midpoints, clear of every node's label box.
    edge_labels: list[dict[str, Any]] = page.evaluate(
        """() => window.openrathLineage.cy.edges().map(edge => ({
            op: edge.data('op'),
            box: edge.renderedBoundingBox({includeNodes: false, includeEdges: false,
                                           includeLabels: true, includeMainLabels: true})}))"""
    )
    assert edge_labels
    for edge in edge_labels:
        for node in nodes:
            assert not overlaps(edge["box"], node["box"]), (edge["op"], node["label"])
    assert errors == []


def test_the_plan_graph_shows_branch_checkpoints_and_step_events(
    browser_context, page, acme, browser_registry
):
    _tenant, project = acme
    run = finished_fanout(browser_registry, project)
    username = member(acme[0], "viewer")
    log_in(page, username, "a-long-browser-password")
    page.goto(f"/console/runs/{run.id}/")

    states = page.locator("#plan-graph g.node").evaluate_all(
        "nodes => Object.fromEntries(nodes.map(n => [n.dataset.node,"
        " n.classList.contains('visited')]))"
    )
    assert states == {
        "plan": True,
        "split": True,
        "market": True,
        "technology": True,
        "review": True,
    }
    fill = page.locator('#plan-graph g.node[data-node="market"] rect').evaluate(
        "rect => getComputedStyle(rect).fill"
    )
    assert fill == "rgb(230, 244, 234)"  # the checkpointed green, not white

    panel = page.locator('.step-events[data-step="market"]')
    assert not panel.is_visible()
    link = page.locator('#plan-graph g.node[data-node="market"] a')
    anchor = link.get_attribute("href")
    assert anchor == "#" + panel.get_attribute("id")
    link.click()
    panel.wait_for(state="visible")
    assert page.url.endswith(anchor)
    rows = panel.locator("ol.timeline li").evaluate_all(
        "items => items.map(i => [i.dataset.run, i.querySelector('.type').textContent])"
    )
    branch_runs = {str(r) for r in Run.objects.filter(parent=run).values_list("id", flat=True)}
    branches = {
        b: str(s) for b, s in Run.objects.filter(parent=run).values_list("branch", "session_id")
    }
    assert rows
    assert {run_id for run_id, _ in rows} <= branch_runs  # a branch step runs in a branch run
    assert any(kind.startswith("step") for _, kind in rows), rows
    # Another node shows its own panel instead.
    page.locator('#plan-graph g.node[data-node="review"] a').click()
    page.locator('.step-events[data-step="review"]').wait_for(state="visible")
    assert not panel.is_visible()
    review_rows = page.locator('.step-events[data-step="review"] ol.timeline li').evaluate_all(
        "items => items.map(i => i.dataset.run)"
    )
    assert set(review_rows) == {str(run.id)}
    # The waterfall: a lane per branch run beside the run's own, and the fan-out's wait.
    spans = page.locator("#waterfall g.span").evaluate_all(
        "spans => spans.map(s => [s.dataset.lane, s.dataset.kind, s.dataset.step])"
    )
    assert [tuple(s) for s in spans] == [
        ("run", "step", "plan"),
        ("run", "step", "split"),
        ("run", "branches", "split"),
        ("run", "step", "review"),
        ("branch market", "step", "market"),
        ("branch technology", "step", "technology"),
    ]
    assert page.locator("#compare-branches").get_attribute("href") == (
        f"/console/sessions/compare/?a={branches['market']}&b={branches['technology']}"
    )
    assert page.locator("#run-effects-link").get_attribute("href") == (
        f"/console/effects/?run={run.id}"
    )
