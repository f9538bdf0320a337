"""Approvals with the context to decide (issue 19, build item 1): the question that started the
run, its evidence, the effects an approval lets happen (with their payload), what each button
does, who else may decide and when it expires; identical requests approved together, each bound
to its own digest."""

from __future__ import annotations

import re

from runs_app.models import Interrupt, Run
from tests.console.conftest import start
from tests.console.test_pages import _main
from tests.runs_app.conftest import drive


def _waiting(registry, project, name: str, state: dict) -> tuple[Run, Interrupt]:
    run = drive(registry, start(registry, project, name, state).id)
    assert run.status == "waiting"
    return run, Interrupt.objects.get(run=run)


def test_an_approval_shows_the_question_evidence_effects_and_who_decides(
    transactional_db, login, registry, project, member
):
    run, interrupt = _waiting(
        registry,
        project,
        "console_publish",
        {"title": "Q3 results", "question": "Summarise the Q3 numbers for the blog"},
    )
    member("admin", username="alice")
    main = _main(login("operator").get("/console/approvals/"))
    card = main[main.index(f'id="interrupt-{interrupt.id}"') :]
    # The question: the first user message of the run's session, and the run's input.
    assert (
        '<blockquote class="first-message"><span class="muted">user:</span> '
        "Summarise the Q3 numbers for the blog</blockquote>"
    ) in card
    assert "&quot;title&quot;: &quot;Q3 results&quot;" in card
    # The evidence: the run's session and its lineage.
    assert f'href="/console/sessions/{run.session_id}/"' in card
    assert f'href="/console/sessions/{run.session_id}/lineage/"' in card
    # What an approval lets happen: the effect named in the request with its exact payload,
    # and the plan's next step that performs non-idempotent effects.
    ahead = re.findall(r'<li class="effect-ahead source-(\w+)">', card)
    assert ahead == ["request", "plan"]
    assert "<strong>publish_post</strong>" in card
    assert "step <code>publish</code> may perform <strong>non_idempotent</strong>" in card
    # What each button does, who else may decide, when it expires.
    assert "<dt><strong>Reject</strong></dt>" in card
    deciders = re.search(r'<p class="deciders muted">Who may decide: (.*?) \(operators', card)
    assert re.findall(r'<span class="mono">([\w-]+)</span>', deciders.group(1)) == [
        "alice",
        "operator-acme",
    ]
    expires = interrupt.expires_at
    assert expires is not None
    assert "; then the run ends timed_out (no default is declared)." in card


def test_a_question_without_expiry_or_effects_says_so(login, waiting):
    _run, interrupt = waiting()
    main = _main(login("viewer").get("/console/approvals/"))
    card = main[main.index(f'id="interrupt-{interrupt.id}"') :]
    assert "Never expires: the run waits until someone decides." in card
    assert "No effect is declared by this step or the next ones" in card
    # A viewer sees the context but no form, and no bulk form.
    assert '<form class="resolve"' not in card
    assert 'class="card bulk"' not in main


def test_identical_requests_are_approved_together_each_bound_to_its_digest(
    transactional_db, login, registry, project
):
    waiting = [_waiting(registry, project, "console_approval", {}) for _ in range(3)]
    digests = {i.request_digest for _, i in waiting}
    assert len(digests) == 1  # the same payload: one group
    client = login("operator")
    main = _main(client.get("/console/approvals/"))
    assert main.count('class="card bulk"') == 1
    shown = re.findall(
        r'name="digest-([0-9a-f-]+)" value="([0-9a-f]{64})"', main[main.index("card bulk") :]
    )
    assert {interrupt_id for interrupt_id, _ in shown} == {str(i.id) for _, i in waiting}
    # Approve two of the three; the third is named with a digest it no longer has.
    (_, first), (_, second), (_, third) = waiting
    data = {
        "interrupt": [str(first.id), str(second.id), str(third.id)],
        f"digest-{first.id}": first.request_digest,
        f"digest-{second.id}": second.request_digest,
        f"digest-{third.id}": "0" * 64,
        "response.note": "ship it",
    }
    response = client.post("/console/approvals/approve-many/", data, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Approved 2 of 3 identical requests." in page
    assert "Not approved" in page
    statuses = {i.id: Interrupt.objects.get(id=i.id) for _, i in waiting}
    assert [statuses[i.id].status for i in (first, second, third)] == [
        "resolved",
        "resolved",
        "pending",
    ]
    assert statuses[first.id].response == {"note": "ship it"}
    assert statuses[first.id].resolved_by.endswith("operator-acme")
    assert Run.objects.get(id=third.run_id).status == "waiting"


def test_a_viewer_cannot_approve_many(transactional_db, login, registry, project):
    _run, interrupt = _waiting(registry, project, "console_approval", {})
    response = login("viewer").post(
        "/console/approvals/approve-many/",
        {"interrupt": [str(interrupt.id)], f"digest-{interrupt.id}": interrupt.request_digest},
    )
    assert response.status_code == 403
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"
