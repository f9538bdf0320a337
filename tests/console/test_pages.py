"""Console pages: what each one shows, read through the scoped selectors."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.conf import settings
from django.test import Client

from openrath_project.console import display, views
from openrath_project.console.templatetags.console_ids import short_id as short_id_filter
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Run
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session
from tests.console.conftest import start
from tests.runs_app.conftest import drive
from tests.support import run_manage, service_missing

pytestmark = pytest.mark.django_db


def _main(response) -> str:
    body = response.content.decode()
    return body[body.index("<main>") : body.index("</main>")]


def _json_script(response, element_id: str):
    body = response.content.decode()
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', body)
    assert match, f"no {element_id} in the page"
    return json.loads(match.group(1))


def test_overview_counts_runs_and_lists_what_waits(login, waiting, needs_review, registry, project):
    waiting()
    needs_review()
    done = start(registry, project, "console_approval", {"schema": None})
    done = drive(registry, done.id)
    response = login("viewer").get("/console/")
    assert response.status_code == 200
    main = _main(response)
    counts = dict(re.findall(r'data-status="(\w+)"><span class="n">(\d+)</span>', main))
    assert counts == {
        "queued": "0",
        "running": "0",
        "waiting": "2",
        "needs_review": "1",
        "succeeded": "0",
        "failed": "0",
        "cancelled": "0",
        "timed_out": "0",
    }
    assert main.count("Ship release 1.2?") == 2
    assert '<a href="/console/effects/#effect-' in main
    assert 'id="nav-pending">2<' in response.content.decode()
    assert 'id="nav-reviews">1<' in response.content.decode()


def test_the_project_filter_narrows_the_lists(login, waiting, project, other_project):
    waiting(project=project)
    waiting(project=other_project)
    client = login("viewer")
    assert _main(client.get("/console/approvals/")).count('class="card approval"') == 2
    client.post("/console/switch/", {"tenant": "acme", "project": str(other_project.id)})
    page = client.get("/console/approvals/")
    assert _main(page).count('class="card approval"') == 1
    assert "project ops" in _main(page)


def test_the_approvals_queue_shows_the_request_and_a_typed_form(login, waiting):
    run, interrupt = waiting()
    page = login("operator").get("/console/approvals/")
    main = _main(page)
    request_json = json.dumps(interrupt.request, indent=2).replace('"', "&quot;")
    assert f'<pre class="json request-payload">{request_json}</pre>' in main
    assert f'name="request_digest" value="{interrupt.request_digest}"' in main
    assert f'<code class="request-digest">{interrupt.request_digest}</code>' in main
    # One typed input per property, the required one marked.
    assert '<input type="text" name="response.note" value="" required>' in main
    assert '<span class="required" title="required">*</span>' in main
    assert '<input type="number" step="1" name="response.priority" value="">' in main
    assert '<option value="&quot;email&quot;">email</option>' in main
    assert 'name="response_json"' not in main
    for decision in ("approve", "respond", "reject"):
        assert f'name="decision" value="{decision}"' in main


def test_a_complex_schema_gets_a_json_textarea(login, waiting):
    waiting(schema={"type": "object", "properties": {"items": {"type": "array"}}})
    main = _main(login("operator").get("/console/approvals/"))
    assert '<textarea name="response_json"' in main
    assert 'name="response.items"' not in main


def test_a_viewer_sees_no_decision_buttons(login, waiting, needs_review):
    waiting()
    needs_review()
    client = login("viewer")
    approvals = _main(client.get("/console/approvals/"))
    assert "Ship release 1.2?" in approvals
    assert 'name="decision"' not in approvals
    assert "<form" not in approvals
    assert "can look at approvals but not decide them" in approvals
    effects = _main(client.get("/console/effects/"))
    assert 'name="outcome"' not in effects
    assert "can look at reviews but not resolve them" in effects


def test_the_effects_queue_shows_request_and_digest(login, needs_review):
    run, effect = needs_review()
    main = _main(login("operator").get("/console/effects/"))
    assert f'id="effect-{effect.id}"' in main
    request_json = json.dumps(effect.request, indent=2).replace('"', "&quot;")
    assert f'<pre class="json request-payload">{request_json}</pre>' in main
    assert f'name="request_digest" value="{effect.request_digest}"' in main
    for outcome in ("applied", "not_applied", "cancel_run"):
        assert f'name="outcome" value="{outcome}"' in main
    assert '<textarea name="result"' in main


def test_runs_list_filters_and_pages(login, registry, project, other_project, monkeypatch):
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    runs = [start(registry, project, "console_approval", {}) for _ in range(3)]
    other = start(registry, other_project, "console_effect", {"to": "x"})
    Run.objects.filter(id=runs[0].id).update(status="cancelled")
    client = login("viewer")

    def ids(response) -> list[str]:
        return re.findall(r'<tr data-run="([0-9a-f-]+)">', response.content.decode())

    newest_first = [str(other.id), *(str(r.id) for r in reversed(runs))]
    first = client.get("/console/runs/")
    assert ids(first) == newest_first[:2]
    older = re.search(r'<a href="\?([^"]+)" id="older">', first.content.decode()).group(1)
    assert ids(client.get(f"/console/runs/?{older.replace('&amp;', '&')}")) == newest_first[2:]
    assert ids(client.get("/console/runs/?status=cancelled")) == [str(runs[0].id)]
    assert ids(client.get("/console/runs/?workflow=console_effect")) == [str(other.id)]
    assert ids(client.get(f"/console/runs/?project={other_project.id}")) == [str(other.id)]


def test_run_page_shows_timeline_plan_and_checkpoints(login, waiting):
    run, interrupt = waiting()
    run.refresh_from_db()
    response = login("operator").get(f"/console/runs/{run.id}/")
    main = _main(response)
    assert '<span id="run-status" class="status status-waiting" data-status="waiting">' in main
    seqs = re.findall(r'<li data-seq="(\d+)" data-type="[a-z._]+" class="ev-\w+"><span', main)
    assert seqs == [str(n) for n in range(1, run.event_seq + 1)]
    assert '<span class="type">run.waiting</span>' in main
    # Typed: the event in words, its raw data on demand.
    assert "waiting for a person: approval “Ship release 1.2?”" in main
    assert '<details class="raw"><summary>raw</summary>' in main
    # The plan graph: both nodes, the waiting step highlighted as current and "waiting".
    nodes = re.findall(r'<g class="node kind-step ([^"]*)" data-node="(\w+)" data-state', main)
    nodes = {name: cls.split() for cls, name in nodes}
    assert nodes == {"review": ["state-waiting", "current"], "publish": ["state-not-reached"]}
    assert 'data-source="review" data-target="publish"' in main
    # The pending approval can be decided from the run page too.
    assert f'id="interrupt-{interrupt.id}"' in main
    assert 'name="origin" value="run"' in main
    config = _json_script(response, "live-config")
    assert config == {
        "kind": "run",
        "id": str(run.id),
        "after": run.event_seq,
        "status": "waiting",
        "next_nodes": ["review"],
        "terminal": ["cancelled", "failed", "succeeded", "timed_out"],
        "ws_path": f"/ws/runs/{run.id}/",
        "api_path": f"/api/v1/runs/{run.id}/",
    }
    assert 'id="cancel-form"' in main
    assert 'id="resume-form" hidden' in main


def test_a_finished_run_shows_checkpoints_and_no_cancel(transactional_db, login, registry, project):
    run = start(registry, project, "console_approval", {"schema": None})
    run = drive(registry, run.id)
    interrupt_resolve(interrupt=run.interrupts.get(), decision="approve", response={"ok": 1})
    run = drive(registry, run.id)
    assert run.status == "succeeded"
    main = _main(login("operator").get(f"/console/runs/{run.id}/"))
    rows = re.findall(r'<tr data-seq="(\d+)">\s*<td>\d+</td><td class="mono">(\w+)</td>', main)
    assert rows == [("2", "publish"), ("1", "review")]
    nodes = re.findall(r'<g class="node kind-step ([^"]*)" data-node="(\w+)" data-state', main)
    assert sorted(nodes) == [("state-done visited", "publish"), ("state-done visited", "review")]
    assert 'id="cancel-form" hidden' in main
    assert "&quot;published&quot;: true" in main


def test_session_page_shows_chunks_tools_trust_and_usage(login, project):
    session = session_services.session_create(
        project=project,
        title="Research",
        chunks=[
            make_draft(role="user", kind="message", content={"text": "Find the report"}),
            make_draft(
                role="assistant",
                kind="tool_call",
                content={"id": "call_1", "name": "search", "arguments": {"q": "Q3 report"}},
                agent="researcher",
                usage={"prompt_tokens": 12, "completion_tokens": 5},
            ),
            make_draft(
                role="tool",
                kind="tool_result",
                content={"tool_call_id": "call_1", "name": "search", "output": "3 hits"},
                agent="researcher",
            ),
        ],
    )
    response = login("viewer").get(f"/console/sessions/{session.id}/")
    main = _main(response)
    assert re.findall(r'<li class="chunk ([^"]+)" data-seq="(\d)">', main) == [
        ("role-user kind-message", "0"),
        ("role-assistant kind-tool_call", "1"),
        ("role-tool kind-tool_result untrusted", "2"),
    ]
    assert '<div class="text">Find the report</div>' in main
    assert 'call <span class="tool-name">search</span> <code class="call-id">call_1</code>' in main
    assert "&quot;q&quot;: &quot;Q3 report&quot;" in main
    assert '<pre class="output">3 hits</pre>' in main
    assert '<span class="trust trust-untrusted">untrusted</span>' in main
    assert '<span class="agent">researcher</span>' in main
    assert '<span class="usage">12 in · 5 out</span>' in main
    config = _json_script(response, "live-config")
    assert (config["kind"], config["after"], config["ws_path"]) == (
        "session",
        2,
        f"/ws/sessions/{session.id}/",
    )


def test_an_empty_session_streams_from_the_start(login, project):
    session = session_services.session_create(project=project, title="empty")
    response = login("viewer").get(f"/console/sessions/{session.id}/")
    assert _json_script(response, "live-config")["after"] == -1
    assert 'id="no-chunks"' in _main(response)


def _fork_merge(project) -> tuple[Session, list[Session]]:
    root = session_services.session_from_user_message(project=project, text="start")
    a = session_services.session_fork(session=root, title="a")
    b = session_services.session_fork(session=root, title="b")
    session_services.chunks_append(
        session=a, drafts=[make_draft(role="assistant", kind="message", content={"text": "A"})]
    )
    session_services.chunks_append(
        session=b, drafts=[make_draft(role="assistant", kind="message", content={"text": "B"})]
    )
    merged = session_services.session_merge(sessions=[a, b], strategy="concat", title="m")
    return root, [root, a, b, merged]


def test_lineage_page_embeds_the_first_page_of_the_graph(login, project):
    if not views.vendor_assets_installed():  # skip locally, fail under CI=true
        service_missing(
            f"needs the console's npm assets {views.VENDOR_FILES}: run ./deploy/bin/install-dev "
            "or npm ci --prefix openrath_project/console/assets"
        )
    root, sessions = _fork_merge(project)
    response = login("viewer").get(f"/console/sessions/{root.id}/lineage/")
    data = _json_script(response, "lineage-data")
    assert data["session"] == str(root.id)
    assert sorted(n["id"] for n in data["nodes"]) == sorted(str(s.id) for s in sessions)
    assert sorted((e["op"], e["child"]) for e in data["edges"]) == sorted(
        [
            ("fork", str(sessions[1].id)),
            ("fork", str(sessions[2].id)),
            ("merge", str(sessions[3].id)),
            ("merge", str(sessions[3].id)),
        ]
    )
    assert data["next"] is None
    body = response.content.decode()
    assert '<script src="/static/vendor/cytoscape/cytoscape.min.js"></script>' in body
    assert '<script src="/static/vendor/cytoscape-dagre/cytoscape-dagre.js"></script>' in body
    assert 'id="assets-missing"' not in body


def test_lineage_page_pages_large_graphs(login, project, monkeypatch):
    monkeypatch.setattr(views, "LINEAGE_PAGE", 2)
    root, sessions = _fork_merge(project)
    data = _json_script(
        login("viewer").get(f"/console/sessions/{root.id}/lineage/"), "lineage-data"
    )
    assert len(data["nodes"]) == 2
    assert data["next"] == (
        f"/api/v1/sessions/{root.id}/lineage/?direction=graph&limit=2&after={data['nodes'][1]['id']}"
    )


def test_lineage_page_says_how_to_install_missing_assets(login, project, monkeypatch):
    monkeypatch.setattr(views, "VENDOR_FILES", ("vendor/cytoscape/not-there.js",))
    root, _ = _fork_merge(project)
    body = login("viewer").get(f"/console/sessions/{root.id}/lineage/").content.decode()
    assert 'id="assets-missing"' in body
    assert "./deploy/bin/install-dev" in body
    assert "npm ci --prefix openrath_project/console/assets" in body
    assert "cytoscape.min.js" not in body


def test_sessions_list(login, project):
    first = session_services.session_from_user_message(project=project, text="one")
    second = session_services.session_from_user_message(project=project, text="two")
    body = login("viewer").get("/console/sessions/").content.decode()
    assert re.findall(r'<tr data-session="([0-9a-f-]+)">', body) == [str(second.id), str(first.id)]


def test_static_assets_are_served_locally(login):
    client = login("viewer")
    for path in (
        "/static/console/console.css",
        "/static/console/live.js",
        "/static/console/lineage.js",
        "/static/vendor/cytoscape/cytoscape.min.js",
        "/static/vendor/cytoscape-dagre/cytoscape-dagre.js",
    ):
        response = client.get(path)
        assert response.status_code == 200, path
    page = client.get("/console/").content.decode()
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing from another host


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_pages_render_for_each_role(login, waiting, needs_review, role):
    run, _ = waiting()
    needs_review()
    client = login(role)
    for path in (
        "/console/",
        "/console/approvals/",
        "/console/effects/",
        "/console/runs/",
        f"/console/runs/{run.id}/",
        "/console/sessions/",
        f"/console/sessions/{run.session_id}/",
        f"/console/sessions/{run.session_id}/lineage/",
    ):
        assert client.get(path).status_code == 200, path


# --- Ids told apart, the overview's runs, the sessions' agents, labels, favicon ------------------


def test_short_ids_show_the_random_tail_with_the_full_id_in_a_title():
    first = "0198a230-d1c4-7000-8000-3f2b9c1a7e55"
    second = "0198a230-d1c4-7000-8000-000000c0ffee"
    assert display.short_id(first) == "…9c1a7e55"
    assert display.short_id(first) != display.short_id(second)  # same time prefix
    assert display.short_id(uuid.UUID(second)) == "…00c0ffee"
    assert display.short_id(None) == display.short_id("") == ""
    assert display.short_id("abc") == "abc"
    assert str(short_id_filter(second)) == (f'<abbr class="id" title="{second}">…00c0ffee</abbr>')
    escaped = "&quot;&gt;&lt;x"
    assert str(short_id_filter('"><x')) == f'<abbr class="id" title="{escaped}">{escaped}</abbr>'


def test_lists_shorten_run_ids_by_their_last_digits(login, waiting):
    run, interrupt = waiting()
    client = login("operator")
    tail = str(run.id).replace("-", "")[-8:]
    expected = f'<abbr class="id" title="{run.id}">…{tail}</abbr>'
    for path in ("/console/runs/", "/console/approvals/", f"/console/runs/{run.id}/"):
        body = _main(client.get(path))
        assert expected in body, path
    assert str(run.id)[:8] + "<" not in _main(client.get("/console/runs/"))


def test_overview_lists_top_level_runs_with_their_branch_count(
    transactional_db, login, project, monkeypatch
):
    from runs_app import registration
    from runs_app.registry import WorkflowRegistry
    from tests.runs_app.workflows import durable

    fanout = WorkflowRegistry()
    fanout.discover([durable.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fanout)
    parent = drive(fanout, start(fanout, project, "parallel", {}).id)
    assert parent.status == "succeeded"
    branches = list(Run.objects.filter(parent=parent))
    assert len(branches) == 2
    main = _main(login("viewer").get("/console/"))
    recent = main[main.index('id="recent-runs"') :]
    rows = re.findall(r'<tr data-run="([0-9a-f-]+)">', recent)
    assert rows == [str(parent.id)]  # the branches are not listed as runs of their own
    assert "· 2 branches" in recent
    assert display.short_id(parent.id) in recent


def test_sessions_list_shows_the_agents_of_each_session(
    login, project, django_assert_max_num_queries
):
    quiet = session_services.session_from_user_message(project=project, text="no agent")
    busy = session_services.session_from_user_message(project=project, text="research")
    session_services.chunks_append(
        session=busy,
        drafts=[
            make_draft(role="assistant", kind="message", content={"text": t}, agent=a)
            for t, a in (("a", "planner"), ("b", "reviewer"), ("c", "planner"))
        ],
    )
    Session.objects.filter(id=quiet.id).update(agent="greeter")
    client = login("viewer")
    client.get("/console/sessions/")  # warm: the login's session and the principal
    extra = session_services.session_from_user_message(project=project, text="one more")
    session_services.chunks_append(
        session=extra,
        drafts=[make_draft(role="assistant", kind="message", content={"text": "x"}, agent="z")],
    )
    with django_assert_max_num_queries(12) as captured:
        body = client.get("/console/sessions/").content.decode()
    agent_queries = [
        q for q in captured.captured_queries if '"agent"' in q["sql"] and "chunk" in q["sql"]
    ]
    assert len(agent_queries) == 1  # one query for the page, not one per session
    cells = dict(
        re.findall(
            r'<tr data-session="([0-9a-f-]+)">.*?<td class="agents">([^<]*)</td>', body, re.S
        )
    )
    assert cells == {
        str(extra.id): "z",
        str(busy.id): "planner, reviewer",
        str(quiet.id): "greeter",
    }


def test_admin_app_labels_and_project_columns_read_as_words(django_user_model, waiting):
    run, _ = waiting()
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-12345678")
    client = Client()
    client.force_login(admin)
    index = client.get(f"/{settings.ADMIN_PATH}").content.decode()
    for label in ("Runs", "Sessions", "Effects", "Memory", "Tenancy"):
        assert f">{label}</a>" in index, label
    for raw in ("Runs_App", "Sessions_App", "Memory_App", "runs_app</a>", "memory_app</a>"):
        assert raw not in index
    runs = client.get(f"/{settings.ADMIN_PATH}runs_app/run/").content.decode()
    row = runs[runs.index(f"{run.id}") :]
    row = row[: row.index("</tr>")]
    assert f">{run.project.slug}<" in row
    assert str(run.project.tenant_id) not in row
    sessions = client.get(f"/{settings.ADMIN_PATH}sessions_app/session/").content.decode()
    assert f">{run.project.slug}<" in sessions
    assert f"{run.project.tenant_id}/" not in sessions


def test_the_favicon_is_served_and_linked(login):
    client = login("viewer")
    page = client.get("/console/").content.decode()
    link = re.search(r'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', page)
    assert link, "no icon link"
    icon = client.get(link.group(1))
    assert icon.status_code == 200
    assert b"<svg" in b"".join(icon.streaming_content if icon.streaming else [icon.content])
    redirect = client.get("/favicon.ico")  # what a browser asks for on every page
    assert (redirect.status_code, redirect["Location"]) == (302, link.group(1))


def test_staff_see_the_admin_link_and_others_do_not(login, member):
    assert f'href="/{settings.ADMIN_PATH}"' not in login("admin").get("/console/").content.decode()
    staff = member("operator", username="staff-operator")
    staff.is_staff = True
    staff.save()
    page = login(user=staff).get("/console/").content.decode()
    assert f'<a href="/{settings.ADMIN_PATH}">Admin</a>' in page


def test_the_admin_login_the_quickstart_prints_opens_the_admin(tmp_path):
    """The printed command, run as printed (with --noinput for a test), makes a login that the
    admin lets in; the demo operator it printed is not let in."""
    env = {"OPENRATH_DATA_DIR": str(tmp_path), "DATABASE_URL": ""}
    quickstart = run_manage("quickstart", "--no-serve", "--no-demo", env=env)
    assert quickstart.returncode == 0, quickstart.stderr
    line = next(x for x in quickstart.stdout.splitlines() if x.strip().startswith("admin login"))
    command = line.split(":", 1)[1].split("(")[0].split()
    assert command[:3] == [".venv/bin/python", "manage.py", "createsuperuser"], line
    made = run_manage(
        *command[2:],
        "--noinput",
        "--email",
        "admin@example.com",
        env={**env, "DJANGO_SUPERUSER_PASSWORD": "a-long-admin-password"},
    )
    assert made.returncode == 0, made.stderr
    printed = re.search(r"password '([^']+)'", quickstart.stdout)
    assert printed, quickstart.stdout
    operator_password = printed.group(1)
    login_url = f"/{settings.ADMIN_PATH}login/"
    check = run_manage(
        "shell",
        "-c",
        "from django.test import Client\n"
        "for name, password in (('admin', 'a-long-admin-password'), "
        f"('operator', {operator_password!r})):\n"
        "    c = Client(HTTP_HOST='localhost')\n"
        f"    c.post('{login_url}', {{'username': name, 'password': password}})\n"
        f"    print(name, c.get('/{settings.ADMIN_PATH}').status_code)",
        env=env,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.split()[-4:] == ["admin", "200", "operator", "302"], check.stdout
