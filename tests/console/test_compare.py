"""Branch compare (issue 19, build item 3): two sessions side by side from where they diverge,
with their common ancestor; and the lineage API's nodes carry the agents the graph colours by."""

from __future__ import annotations

import re

from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session
from tests.console.test_pages import _main
from tests.factories import ProjectFactory, TenantFactory


def _say(session: Session, *texts: str, agent: str) -> None:
    session_services.chunks_append(
        session=session,
        drafts=[make_draft(role="assistant", content={"text": t}, agent=agent) for t in texts],
    )


def _branches(project):
    root = session_services.session_create(
        project=project,
        title="plan",
        chunks=[
            make_draft(role="user", content={"text": "Should we enter the market?"}),
            make_draft(role="assistant", content={"text": "Plan: two angles"}, agent="planner"),
        ],
    )
    market = session_services.session_fork(session=root, title="market")
    _say(market, "Market: three competitors", "Market: demand grows", agent="market-analyst")
    tech = session_services.session_fork(session=root, title="technology")
    _say(tech, "Technology: mature stack", agent="technology-analyst")
    # A fork of a fork, cut before the branch's second chunk: still descends from the root.
    deeper = session_services.session_fork(session=market, at=3, title="market, again")
    _say(deeper, "Market: a second look", agent="market-analyst")
    return root, market, tech, deeper


def _texts(side: str) -> list[str]:
    return re.findall(r'<div class="text">([^<]*)</div>', side)


def test_two_branches_side_by_side_after_their_common_ancestor(login, project):
    root, market, tech, _deeper = _branches(project)
    main = _main(login("viewer").get(f"/console/sessions/compare/?a={market.id}&b={tech.id}"))
    ancestor = re.search(
        r'<p class="card compare-ancestor" id="compare-ancestor">(.*?)</p>', main, re.S
    )
    assert f'href="/console/sessions/{root.id}/"' in ancestor.group(1)
    assert "2 generations between the two" in ancestor.group(1)
    assert '<strong id="compare-shared">2</strong> leading chunks shared' in main
    a, b = main.split('data-side="b"')
    assert _texts(a.split('data-side="a"')[1]) == [
        "Market: three competitors",
        "Market: demand grows",
    ]
    assert _texts(b) == ["Technology: mature stack"]


def test_a_fork_of_a_fork_shares_up_to_its_fork_point(login, project):
    _root, market, _tech, deeper = _branches(project)
    main = _main(login("viewer").get(f"/console/sessions/compare/?a={market.id}&b={deeper.id}"))
    # market is deeper's parent: the nearest common ancestor is market itself.
    ancestor = re.search(r'id="compare-ancestor">(.*?)</p>', main, re.S).group(1)
    assert f'href="/console/sessions/{market.id}/"' in ancestor
    assert '<strong id="compare-shared">3</strong>' in main
    a, b = main.split('data-side="b"')
    assert _texts(a.split('data-side="a"')[1]) == ["Market: demand grows"]
    assert _texts(b) == ["Market: a second look"]


def test_unrelated_sessions_have_no_common_ancestor(login, project):
    one = session_services.session_create(project=project, title="one")
    two = session_services.session_create(project=project, title="two")
    main = _main(login("viewer").get(f"/console/sessions/compare/?a={one.id}&b={two.id}"))
    assert "These sessions have no common ancestor." in main
    assert main.count('<p class="empty">Nothing after the shared chunks.</p>') == 2


def test_another_tenants_session_is_a_404_and_the_picker_comes_empty(login, project):
    mine = session_services.session_create(project=project, title="mine")
    other_project = ProjectFactory(tenant=TenantFactory(slug="globex"), slug="x")
    theirs = session_services.session_create(project=other_project, title="theirs")
    client = login("viewer")
    response = client.get(f"/console/sessions/compare/?a={mine.id}&b={theirs.id}")
    assert response.status_code == 404
    assert "theirs" not in response.content.decode()
    empty = client.get("/console/sessions/compare/")
    assert empty.status_code == 200
    assert 'id="compare-pick"' in empty.content.decode()
    assert 'id="compare"' not in empty.content.decode()


def test_the_lineage_api_nodes_carry_their_agents(login, project):
    root, market, tech, deeper = _branches(project)
    client = login("viewer")
    response = client.get(f"/api/v1/sessions/{root.id}/lineage/?limit=2")
    assert response.status_code == 200
    first = response.json()
    later = client.get(first["next"]).json()
    agents = {n["title"]: n["agents"] for n in first["nodes"] + later["nodes"]}
    assert agents == {
        "plan": [{"agent": "planner", "chunks": 1}],
        "market": [{"agent": "market-analyst", "chunks": 2}],
        "technology": [{"agent": "technology-analyst", "chunks": 1}],
        "market, again": [{"agent": "market-analyst", "chunks": 1}],
    }
    # The lineage page offers every session of the graph for a compare, without JavaScript.
    main = _main(client.get(f"/console/sessions/{root.id}/lineage/"))
    picker = main[main.index('id="lineage-compare"') :]
    options = re.findall(r'<option value="([0-9a-f-]+)"', picker.split('id="compare-b"')[0])
    assert options == [str(s.id) for s in (root, market, tech, deeper)]
