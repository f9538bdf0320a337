"""The console in a real browser against a real server: approvals, live runs and sessions over
the WebSocket, the lineage graph, and a viewer who cannot act."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.services import user_join_tenant
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Interrupt, Run
from runs_app.registry import WorkflowRegistry
from runs_app.services import run_create
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session
from tests.browser.conftest import log_in, require_console_assets, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD = "a-long-browser-password"
DEFAULT_HASHER = "django.contrib.auth.hashers.PBKDF2PasswordHasher"
#: How long a page may take to show what the server's workers did: generous, for a loaded machine
#: (a wait ends as soon as the page shows it).
LIVE_MS = 60_000


def member(tenant: Tenant, role: str) -> str:
    """A login the server can check: hashed with its own (default) hasher, not the tests' MD5."""
    username = f"{role}-user"
    with override_settings(PASSWORD_HASHERS=[DEFAULT_HASHER]):
        user_join_tenant(tenant=tenant, username=username, role=role, password=PASSWORD)
    return username


def waiting_run(
    registry: WorkflowRegistry, project: Project, name: str, state: dict | None = None
) -> tuple[Run, Interrupt]:
    """Start a run on the server's workers and wait until it asks its question."""
    run, _ = run_create(project=project, workflow=registry.get(name), state=state or {})
    interrupt = wait_until(
        lambda: Interrupt.objects.filter(run=run, status="pending").first(),
        timeout=120,
        what=f"{name} to wait for a person",
    )
    wait_until(
        lambda: Run.objects.get(id=run.id).status == "waiting", timeout=60, what="status waiting"
    )
    return Run.objects.get(id=run.id), interrupt


def mark_page(page: Any) -> None:
    """A marker that a reload would erase."""
    page.evaluate("window.__notReloaded = true")


def still_same_page(page: Any) -> bool:
    return bool(page.evaluate("window.__notReloaded === true"))


def test_operator_approves_and_watches_the_run_finish_live(
    browser_context, page, acme, browser_registry
):
    tenant, project = acme
    username = member(tenant, "operator")
    run, interrupt = waiting_run(browser_registry, project, "browser_approval")
    log_in(page, username, PASSWORD)

    # The run page, opened while the run waits: live over the WebSocket.
    run_page = browser_context.new_page()
    run_page.goto(f"/console/runs/{run.id}/")
    run_page.wait_for_function(
        "() => window.openrathLive && window.openrathLive.transport === 'websocket'"
    )
    assert run_page.inner_text("#run-status") == "waiting"
    assert run_page.get_attribute('#plan-graph g.node[data-node="review"]', "class") == (
        "node kind-step state-waiting current"
    )
    mark_page(run_page)

    # The approvals queue shows the request in full, and the operator approves it.
    page.goto("/console/approvals/")
    card = page.locator(f"#interrupt-{interrupt.id}")
    request_text = card.locator("pre.request-payload").inner_text()
    assert '"title": "Deploy 2.0 to production?"' in request_text
    assert '"regions": [\n    "eu",\n    "us"\n  ]' in request_text
    assert card.locator("input[name=request_digest]").get_attribute("value") == (
        interrupt.request_digest
    )
    card.locator("input[name='response.note']").fill("go ahead")
    card.locator("button[value=approve]").click()
    page.wait_for_url("**/console/approvals/")
    assert "Approve: “Deploy 2.0 to production?”" in page.inner_text("main")

    # Without a reload, the run page follows the run to the end.
    run_page.wait_for_function(
        "() => document.getElementById('run-status').dataset.status === 'succeeded'",
        timeout=LIVE_MS,
    )
    assert still_same_page(run_page)
    assert run_page.inner_text("#run-status") == "succeeded"
    types = run_page.locator("#events li .type").all_inner_texts()
    assert types[-1] == "run.succeeded"
    assert "interrupt.resolved" in types
    assert run_page.locator("#plan-graph g.node.current").count() == 0
    assert run_page.locator("#cancel-form").is_hidden()
    seqs = [
        int(s)
        for s in run_page.locator("#events li").evaluate_all(
            "items => items.map(item => item.dataset.seq)"
        )
    ]
    assert seqs == list(range(1, len(seqs) + 1))  # every event once, in order
    finished = Run.objects.get(id=run.id)
    assert (finished.status, finished.output["note"]) == ("succeeded", "go ahead")
    assert seqs[-1] == finished.event_seq


def test_without_websockets_the_run_page_polls_the_api(
    browser_context, page, acme, browser_registry
):
    tenant, project = acme
    username = member(tenant, "viewer")
    run, interrupt = waiting_run(
        browser_registry, project, "browser_approval", {"deploy_seconds": 0}
    )
    log_in(page, username, PASSWORD)
    page.add_init_script("delete window.WebSocket")  # a browser or proxy without WebSockets
    page.goto(f"/console/runs/{run.id}/")
    page.wait_for_function(
        "() => window.openrathLive && window.openrathLive.transport === 'polling'"
    )
    assert page.inner_text("#live") == "live (polling)"
    mark_page(page)
    interrupt_resolve(
        interrupt=interrupt, decision="approve", response={"note": "polled"}, actor="user:test"
    )
    page.wait_for_function(
        "() => document.getElementById('run-status').dataset.status === 'succeeded'",
        timeout=LIVE_MS,
    )
    assert still_same_page(page)
    assert page.locator("#events li .type").all_inner_texts()[-1] == "run.succeeded"


def test_session_page_shows_chunks_as_they_are_written(
    browser_context, page, acme, browser_registry
):
    tenant, project = acme
    username = member(tenant, "viewer")
    run, interrupt = waiting_run(
        browser_registry, project, "browser_stream", {"chunks": 4, "pause": 0.4}
    )
    log_in(page, username, PASSWORD)
    page.goto(f"/console/sessions/{run.session_id}/")
    page.wait_for_function(
        "() => window.openrathLive && window.openrathLive.transport === 'websocket'"
    )
    assert page.locator("#chunks li.chunk").count() == 0
    mark_page(page)
    page.evaluate(
        """() => {
            window.__typingSeen = [];
            new MutationObserver(() => {
                document.querySelectorAll('#typing .typing').forEach(line =>
                    window.__typingSeen.push(line.textContent));
            }).observe(document.getElementById('typing'), {childList: true, subtree: true});
        }"""
    )

    # Let the workflow go: it writes four chunks, about half a second apart.
    interrupt_resolve(interrupt=interrupt, decision="approve", actor="user:test")
    page.wait_for_function("() => document.querySelectorAll('#chunks li.chunk').length >= 1")
    first_seen = page.locator("#chunks li.chunk").count()
    page.wait_for_function(
        "() => document.querySelectorAll('#chunks li.chunk').length === 4", timeout=LIVE_MS
    )
    assert first_seen < 4  # they arrived one by one, not all at once on a reload
    assert still_same_page(page)
    texts = page.locator("#chunks li.chunk .text").all_inner_texts()
    assert texts == ["line 1", "line 2", "line 3", "line 4"]
    agents = page.locator("#chunks li.chunk .agent").all_inner_texts()
    assert agents == ["narrator"] * 4
    assert page.inner_text("#session-length") == "4"
    # Token deltas showed as a transient typing line, gone with the chunk that followed it.
    assert "narrator is typing: line 1" in page.evaluate("window.__typingSeen")
    page.wait_for_function("() => document.querySelectorAll('#typing .typing').length === 0")


def _lineage(project: Project) -> list[Session]:
    root = session_services.session_from_user_message(project=project, text="plan the trip")
    left = session_services.session_fork(session=root, title="flights")
    right = session_services.session_fork(session=root, title="hotels")
    for branch, text in ((left, "found flights"), (right, "found hotels")):
        session_services.chunks_append(
            session=branch,
            drafts=[make_draft(role="assistant", kind="message", content={"text": text})],
        )
    merged = session_services.session_merge(sessions=[left, right], title="itinerary")
    detached = session_services.session_detach(session=merged, title="archive")
    Session.objects.filter(id=left.id).update(agent="flight-agent")
    Session.objects.filter(id=right.id).update(agent="hotel-agent")
    return [root, left, right, merged, detached]


def test_lineage_graph_renders_the_fork_merge_graph(browser_context, page, acme):
    require_console_assets()
    tenant, project = acme
    username = member(tenant, "viewer")
    root, left, right, merged, detached = _lineage(project)
    log_in(page, username, PASSWORD)
    page.goto(f"/console/sessions/{root.id}/lineage/")
    page.wait_for_function(
        "() => window.openrathLineage && window.openrathLineage.cy.nodes().length > 0"
    )
    counts = page.evaluate(
        """() => {
            const cy = window.openrathLineage.cy;
            const ops = {};
            cy.edges().forEach(edge => { ops[edge.data('op')] = (ops[edge.data('op')] || 0) + 1; });
            return {nodes: cy.nodes().length, edges: cy.edges().length, ops: ops,
                    pending: window.openrathLineage.pending()};
        }"""
    )
    assert counts == {
        "nodes": 5,
        "edges": 5,
        "ops": {"fork": 2, "merge": 2, "detach": 1},
        "pending": 0,
    }
    merge_sources = page.evaluate(
        f"window.openrathLineage.cy.getElementById('{merged.id}').incomers('node')"
        ".map(n => n.id()).sort()"
    )
    assert merge_sources == sorted([str(left.id), str(right.id)])
    legend = page.locator("#legend-agents .legend-agent").evaluate_all(
        "items => items.map(item => item.dataset.agent)"
    )
    assert legend == ["(no agent)", "flight-agent", "hotel-agent"]
    colors = page.evaluate(
        f"""() => [
            window.openrathLineage.cy.getElementById('{left.id}').data('color'),
            window.openrathLineage.cy.getElementById('{right.id}').data('color')]"""
    )
    assert colors[0] != colors[1]
    # A click on a node opens its session.
    # (From a timer: a navigation inside evaluate() would leave evaluate() waiting.)
    page.evaluate(
        f"setTimeout(() => window.openrathLineage.cy.getElementById('{right.id}').emit('tap'))"
    )
    page.wait_for_url(f"**/console/sessions/{right.id}/")
    assert "found hotels" in page.inner_text("#chunks")


def test_a_viewer_has_no_approve_button_and_a_forged_post_is_refused(
    browser_context, page, acme, browser_registry
):
    tenant, project = acme
    username = member(tenant, "viewer")
    run, interrupt = waiting_run(browser_registry, project, "browser_approval")
    log_in(page, username, PASSWORD)
    page.goto("/console/approvals/")
    card = page.locator(f"#interrupt-{interrupt.id}")
    assert "Deploy 2.0 to production?" in card.inner_text()
    assert card.locator("button").count() == 0
    assert card.locator("form").count() == 0
    assert "can look at approvals but not decide them" in card.inner_text()

    # A forged POST with the viewer's own valid session and CSRF token.
    token = next(c["value"] for c in browser_context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"/console/approvals/{interrupt.id}/resolve/",
        form={
            "csrfmiddlewaretoken": token,
            "decision": "approve",
            "request_digest": interrupt.request_digest,
            "response.note": "forged",
        },
        headers={"Referer": page.url},
    )
    assert response.status == 403
    assert "this action needs the grant" in response.text()
    interrupt.refresh_from_db()
    assert (interrupt.status, interrupt.decision, interrupt.response) == ("pending", "", None)
    assert Run.objects.get(id=run.id).status == "waiting"
