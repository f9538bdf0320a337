"""The plan diagram's layout (pure Python, no database)."""

from __future__ import annotations

from openrath_project.console.plan_layout import LAYER_GAP, MARGIN, NODE_HEIGHT, layout


def _graph(nodes, entry, edges):
    return {
        "entry": entry,
        "nodes": [{"id": n, "kind": k, "entry": n == entry, "successors": s} for n, k, s in nodes],
        "edges": [{"source": a, "target": b, "branch": br} for a, b, br in edges],
    }


def test_layers_follow_the_shortest_distance_from_the_entry():
    graph = _graph(
        [
            ("start", "step", ["route"]),
            ("route", "router", ["a", "b"]),
            ("a", "step", ["join"]),
            ("b", "step", ["join"]),
            ("join", "step", ["start"]),  # a loop back to the entry
        ],
        "start",
        [
            ("start", "route", False),
            ("route", "a", True),
            ("route", "b", True),
            ("a", "join", False),
            ("b", "join", False),
            ("join", "start", False),
        ],
    )
    placed = layout(graph)
    layers = {n.id: n.layer for n in placed.nodes}
    assert layers == {"start": 0, "route": 1, "a": 2, "b": 2, "join": 3}
    ys = {n.id: n.y for n in placed.nodes}
    assert ys["start"] == MARGIN
    assert ys["a"] == ys["b"] == MARGIN + 2 * (NODE_HEIGHT + LAYER_GAP)
    a, b = (n for n in placed.nodes if n.layer == 2)
    assert a.x + a.width < b.x  # side by side, not overlapping
    assert placed.height == 2 * MARGIN + 4 * NODE_HEIGHT + 3 * LAYER_GAP
    back = [e for e in placed.edges if e.back]
    assert [(e.source, e.target) for e in back] == [("join", "start")]
    assert [e.branch for e in placed.edges] == [False, True, True, False, False, False]
    assert all(e.path.startswith("M ") and " C " in e.path for e in placed.edges)
    assert next(n for n in placed.nodes if n.id == "start").entry is True


def test_long_names_are_cut_and_unknown_edges_ignored():
    name = "a_very_long_step_name_that_keeps_going"
    placed = layout(_graph([(name, "step", [])], name, [(name, "nowhere", False)]))
    (node,) = placed.nodes
    assert node.label == "a_very_long_step_name_that_…"
    assert len(node.label) == 28
    assert placed.edges == ()


def test_an_empty_graph():
    placed = layout({"nodes": [], "edges": []})
    assert (placed.nodes, placed.edges) == ((), ())
