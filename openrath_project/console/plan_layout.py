"""Layout of a workflow plan graph for the run page's SVG diagram. Pure Python.

Nodes are placed in layers by their shortest distance from the entry (a loop back to an
earlier node does not push it down), top to bottom, in plan order within a layer. Edges go
from the bottom of a node to the top of its successor; an edge to the same or an earlier
layer is drawn as a curve on the right, so loops stay readable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NODE_HEIGHT = 38
LAYER_GAP = 46
NODE_GAP = 24
MARGIN = 16
CHAR_WIDTH = 7.2
MIN_WIDTH = 110
MAX_LABEL = 28


@dataclass(frozen=True)
class PlacedNode:
    id: str
    label: str
    kind: str
    entry: bool
    join: bool
    fanout: bool
    layer: int
    x: float
    y: float
    width: float
    height: float
    #: The id of the node's events panel on the run page (``step-<n>``, the node's position in
    #: the plan): step names are code, not guaranteed to be valid fragment identifiers.
    anchor: str = ""

    @property
    def cx(self) -> float:
        return self.x + self.width / 2

    @property
    def text_y(self) -> float:
        return self.y + self.height / 2 + 4


@dataclass(frozen=True)
class PlacedEdge:
    source: str
    target: str
    path: str
    branch: bool
    back: bool


@dataclass(frozen=True)
class PlanLayout:
    nodes: tuple[PlacedNode, ...]
    edges: tuple[PlacedEdge, ...]
    width: float
    height: float


def _label(node_id: str) -> str:
    return node_id if len(node_id) <= MAX_LABEL else node_id[: MAX_LABEL - 1] + "…"


def _layers(graph: Mapping[str, Any]) -> dict[str, int]:
    nodes = [str(n["id"]) for n in graph.get("nodes", [])]
    successors: dict[str, list[str]] = {
        str(n["id"]): [str(s) for s in n.get("successors", [])] for n in graph.get("nodes", [])
    }
    entry = str(graph.get("entry") or (nodes[0] if nodes else ""))
    layer: dict[str, int] = {}
    if entry in successors:
        layer[entry] = 0
        queue = deque([entry])
        while queue:
            current = queue.popleft()
            for nxt in successors.get(current, []):
                if nxt in successors and nxt not in layer:
                    layer[nxt] = layer[current] + 1
                    queue.append(nxt)
    deepest = max(layer.values(), default=-1)
    for node_id in nodes:  # unreachable nodes (a plan never has them; be robust anyway)
        if node_id not in layer:
            deepest += 1
            layer[node_id] = deepest
    return layer


def layout(graph: Mapping[str, Any]) -> PlanLayout:
    """Place the nodes and route the edges of ``Plan.graph()`` (``WorkflowPlan.graph``)."""
    layer_of = _layers(graph)
    by_layer: dict[int, list[Mapping[str, Any]]] = {}
    for node in graph.get("nodes", []):
        by_layer.setdefault(layer_of[str(node["id"])], []).append(node)
    widths = {
        str(n["id"]): max(MIN_WIDTH, len(_label(str(n["id"]))) * CHAR_WIDTH + 28)
        for n in graph.get("nodes", [])
    }
    row_widths = {
        index: sum(widths[str(n["id"])] for n in row) + NODE_GAP * (len(row) - 1)
        for index, row in by_layer.items()
    }
    total_width = max(row_widths.values(), default=0) + 2 * MARGIN + 60  # room for back edges
    position = {str(n["id"]): i for i, n in enumerate(graph.get("nodes", []))}
    placed: dict[str, PlacedNode] = {}
    for index in sorted(by_layer):
        row = by_layer[index]
        x = MARGIN + (total_width - 60 - 2 * MARGIN - row_widths[index]) / 2
        y = MARGIN + index * (NODE_HEIGHT + LAYER_GAP)
        for node in row:
            node_id = str(node["id"])
            placed[node_id] = PlacedNode(
                id=node_id,
                label=_label(node_id),
                kind=str(node.get("kind", "step")),
                entry=bool(node.get("entry")),
                join=bool(node.get("join")),
                fanout=bool(node.get("fanout")),
                layer=index,
                x=round(x, 1),
                y=float(y),
                width=round(widths[node_id], 1),
                height=float(NODE_HEIGHT),
                anchor=f"step-{position[node_id]}",
            )
            x += widths[node_id] + NODE_GAP
    edges: list[PlacedEdge] = []
    for edge in graph.get("edges", []):
        source, target = placed.get(str(edge["source"])), placed.get(str(edge["target"]))
        if source is None or target is None:
            continue
        back = target.layer <= source.layer
        if back:
            x1, y1 = source.x + source.width, source.y + source.height / 2
            x2, y2 = target.x + target.width, target.y + target.height / 2
            bend = max(x1, x2) + 40
            path = (
                f"M {x1:.1f} {y1:.1f} C {bend:.1f} {y1:.1f}, {bend:.1f} {y2:.1f}, {x2:.1f} {y2:.1f}"
            )
        else:
            x1, y1 = source.cx, source.y + source.height
            x2, y2 = target.cx, target.y
            mid = (y1 + y2) / 2
            path = (
                f"M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f}, {x2:.1f} {mid:.1f}, {x2:.1f} {y2:.1f}"
            )
        edges.append(
            PlacedEdge(
                source=source.id,
                target=target.id,
                path=path,
                branch=bool(edge.get("branch")),
                back=back,
            )
        )
    layers = max(by_layer, default=-1) + 1
    height = 2 * MARGIN + layers * NODE_HEIGHT + max(0, layers - 1) * LAYER_GAP
    return PlanLayout(
        nodes=tuple(placed.values()),
        edges=tuple(edges),
        width=round(total_width, 1),
        height=float(height),
    )
