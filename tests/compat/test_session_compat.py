"""Item 2: OpenRath's Session names and semantics next to ours (docs/migrating-from-openrath.md)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from openrath_project.errors import ValidationFailed
from openrath_project.session import ChunkKind, ChunkRow, ChunkTable, LineageKind, Session
from openrath_project.session.graph import (
    LineageConsistencyError,
    export_journal_jsonl,
    export_jsonl,
    lineage_journal_tracking,
    session_graph_mode_override,
)
from openrath_project.session.manager import session_registry
from sessions_app.chunk_table import TokenUsage
from sessions_app.models import LineageEdge
from sessions_app.models import Session as SessionRow
from sessions_app.services import project_workspace_root

pytestmark = pytest.mark.django_db


def _texts(session: Session) -> list[tuple[str, object]]:
    return [(row.kind.value, row.payload.get("content")) for row in session.chunk_table]


def test_constructors(project):
    prompt = Session.from_agent_prompt("You are terse.", project=project)
    assert _texts(prompt) == [("system", "You are terse.")]
    assert prompt.lineage_kind is LineageKind.LEAF_SYSTEM
    assert _texts(Session.create("user", "hi", project=project)) == [("user", "hi")]
    assert _texts(Session.create("system", "be kind", project=project)) == [("system", "be kind")]
    empty = Session.create("empty", "ignored", project=project)
    assert len(empty) == 0
    assert empty.lineage_kind is LineageKind.OP_CREATE
    before = SessionRow.objects.count()
    with pytest.raises(ValidationFailed, match="unknown kind 'bot'"):
        Session.create("bot", "x", project=project)
    assert SessionRow.objects.count() == before
    # Ours still takes chunk dicts.
    ours = Session.create([{"role": "user", "content": "a"}], project=project)
    assert _texts(ours) == [("user", "a")]


def test_a_chunk_table_seeds_a_stored_session(project):
    table = ChunkTable(
        rows=(
            ChunkRow(ChunkKind.SYSTEM, {"content": "sys"}),
            ChunkRow(ChunkKind.USER, {"content": "read a.txt"}),
            ChunkRow(
                ChunkKind.ASSISTANT,
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                        }
                    ],
                },
            ),
            ChunkRow(
                ChunkKind.TOOL_RESULT, {"tool_call_id": "c1", "name": "read_file", "content": "A"}
            ),
            ChunkRow(ChunkKind.ASSISTANT, {"content": "It says A.", "tool_calls": None}),
        )
    )
    session = Session(table, project=project)
    # Stored as our chunks: the tool call is its own chunk.
    assert [(c.role, c.kind) for c in session.chunks] == [
        ("system", "message"),
        ("user", "message"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "message"),
    ]
    # And read back as the same OpenRath rows.
    assert session.chunk_table == table
    assert session.text() == "It says A."


def test_chunk_table_groups_an_assistant_message_with_its_tool_calls(project):
    session = Session.from_user_message("go", project=project)
    session.extend(
        [
            {"role": "assistant", "kind": "message", "content": "Looking."},
            {
                "role": "assistant",
                "kind": "tool_call",
                "content": {"id": "c1", "name": "list_dir", "arguments": {"path": "."}},
            },
            {
                "role": "tool",
                "kind": "tool_result",
                "tool_call_id": "c1",
                "content": {"tool_call_id": "c1", "name": "list_dir", "output": {"entries": []}},
            },
            {"role": "assistant", "kind": "event", "content": {"type": "note"}},
        ]
    )
    assert session.chunk_table.rows == (
        ChunkRow(ChunkKind.USER, {"content": "go"}),
        ChunkRow(
            ChunkKind.ASSISTANT,
            {
                "content": "Looking.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "list_dir", "arguments": '{"path": "."}'},
                    }
                ],
            },
        ),
        ChunkRow(
            ChunkKind.TOOL_RESULT,
            {"tool_call_id": "c1", "name": "list_dir", "content": '{"entries": []}'},
        ),
    )


def test_lineage_fields(project):
    root = Session.from_user_message("root", project=project)
    fork = root.fork()
    detached = root.detach()
    merged = Session.merge(fork, root.fork())
    assert root.parent_session_ids == ()
    assert root.lineage_kind is LineageKind.LEAF_USER
    assert root.lineage_operator == "Session.create"
    assert fork.parent_session_ids == (root.id,)
    assert (fork.lineage_kind, fork.lineage_operator) == (LineageKind.OP_FORK, "Session.fork")
    # A detach keeps its source as an edge (op detach) but has no parents.
    assert LineageEdge.objects.filter(child_id=detached.id, op="detach").count() == 1
    assert detached.parent_session_ids == ()
    assert detached.lineage_kind is LineageKind.OP_DETACH
    assert merged.parent_session_ids[0] == fork.id
    assert merged.lineage_kind is LineageKind.OP_MERGE
    assert merged.lineage_extras == (("strategy", "concat"),)


def test_instance_merge_is_openraths_and_the_classmethod_stays_ours(project):
    root = Session.from_user_message("Which database?", project=project)
    pro = root.fork()
    pro.append("Postgres.", role="assistant", usage={"prompt_tokens": 10, "completion_tokens": 2})
    con = root.fork()
    con.append("SQLite.", role="assistant", usage={"prompt_tokens": 7, "completion_tokens": 1})

    # a.merge(b): every row of a, then every row of b (the shared question twice), as OpenRath.
    both = pro.merge(con)
    assert [row.payload["content"] for row in both.chunk_table] == [
        "Which database?",
        "Postgres.",
        "Which database?",
        "SQLite.",
    ]
    assert both.parent_session_ids == (pro.id, con.id)
    assert both.lineage_kind is LineageKind.OP_MERGE
    # Usage is summed on the merge (on read: stored totals still count each token once).
    assert both.cumulative_usage == TokenUsage(
        prompt_tokens=17, completion_tokens=3, total_tokens=20
    )
    assert both.usage["total_tokens"] == 0
    # Copy-on-write: a is the base, only b's rows are stored again.
    assert both.row.base_id == pro.id
    assert both.row.own_len == 2

    # Session.merge(*sessions): ours, after the common prefix.
    ours = Session.merge(pro, con)
    assert [c.text for c in ours.chunks] == ["Which database?", "Postgres.", "SQLite."]
    assert ours.cumulative_usage == TokenUsage(
        prompt_tokens=17, completion_tokens=3, total_tokens=20
    )
    # And an explicit strategy on an instance.
    assert [c.text for c in pro.merge(con, strategy="concat").chunks] == [
        "Which database?",
        "Postgres.",
        "SQLite.",
    ]


def test_cumulative_usage_is_an_object_and_none_when_nothing_was_spent(project):
    session = Session.from_user_message("q", project=project)
    assert session.cumulative_usage is None
    session.append("a", role="assistant", usage={"prompt_tokens": 5, "completion_tokens": 3})
    usage = session.cumulative_usage
    assert usage is not None
    assert usage.total_tokens == 8
    assert usage.prompt_tokens == 5
    assert session.usage["total_tokens"] == 8  # ours, next to it
    assert session.fork().cumulative_usage is None  # as OpenRath: a fork has spent nothing


def test_to_spec_none_is_a_workspace_of_the_sessions_own(project):
    a = Session.from_user_message("a", project=project).to("local", spec=None)
    b = Session.from_user_message("b", project=project).to("local")
    root = project_workspace_root(tenant_id=project.tenant_id, project_id=project.id)
    assert a.placement["spec"] == str(root / str(a.id))
    assert b.placement["spec"] == str(root / str(b.id))
    assert a.sandbox_backend == "local"
    # A relative spec stays confined under the project's root (the placement rule of today).
    assert Session.from_user_message("c", project=project).to("local", spec=".").placement[
        "spec"
    ] == str(root)


def test_bind_and_close_sandbox(project, tmp_path):
    owner = Session.from_user_message("x", project=project).to("local", spec=str(tmp_path))
    assert owner.sandbox is None
    with owner:
        handle = owner.sandbox
        assert handle is not None
        handle.write_file("note.txt", "hi")
    assert owner.sandbox is None  # closed on exit; the placement stays
    assert owner.placement["spec"] == str(tmp_path)

    guest = Session.from_user_message("y", project=project)
    assert guest.sandbox_backend is None
    guest.bind_sandbox(owner.require_sandbox())
    assert guest.placement["spec"] == owner.require_sandbox().root
    assert guest.require_sandbox().read_file("note.txt") == "hi"
    third = Session.from_user_message("z", project=project).bind_sandbox(owner)
    assert third.placement == owner.placement
    assert guest.close_sandbox() is guest
    assert guest.sandbox is None
    with pytest.raises(ValidationFailed, match="bind_sandbox takes"):
        guest.bind_sandbox(object())


def test_example_02_graph_journal_and_registry(project, tmp_path):
    reg = session_registry()
    with lineage_journal_tracking() as journal:
        root = Session.from_user_message("Initial user message.", project=project)
        plan = root.fork()
        critique = root.fork()
        dropped_id = plan.detach().id  # registered nowhere, collected: still exported
        leaf = critique.fork()
        reg.register(leaf)
    # Only made sessions are journaled (from_user_message is not, as in OpenRath).
    assert journal.visit_order == [plan.id, critique.id, dropped_id, leaf.id]
    assert reg.get(leaf.id) is leaf

    from openrath_project.session.graph import ancestors_bfs, descendants_dfs_preorder, edge_pairs

    by_id = {s.id: s for s in (root, plan, critique, leaf)}
    assert list(edge_pairs(by_id)) == [
        (root.id, plan.id),
        (root.id, critique.id),
        (critique.id, leaf.id),
    ]
    assert ancestors_bfs(by_id, leaf.id) == (critique.id, root.id)
    assert descendants_dfs_preorder(by_id, root.id) == (critique.id, leaf.id, plan.id)

    out = tmp_path / "lineage.jsonl"
    export_journal_jsonl(journal, out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [str(i) for i in journal.visit_order]
    assert rows[0] == {
        "id": str(plan.id),
        "parent_session_ids": [str(root.id)],
        "lineage_operator": "Session.fork",
        "lineage_kind": "op_fork",
        "lineage_extras": [],
        "chunk_count": 1,
        "cumulative_usage": None,
    }
    assert rows[2]["parent_session_ids"] == []
    assert rows[2]["lineage_kind"] == "op_detach"

    missing = type(journal)(visit_order=[uuid.uuid4()])
    export_journal_jsonl(missing, tmp_path / "none.jsonl")
    assert (tmp_path / "none.jsonl").read_text() == ""
    with pytest.raises(KeyError):
        export_journal_jsonl(missing, tmp_path / "x.jsonl", skip_unknown=False)
    export_jsonl([root], Path(tmp_path / "one.jsonl"))
    assert json.loads((tmp_path / "one.jsonl").read_text())["lineage_kind"] == "leaf_user"


def test_lineage_cannot_be_switched_off():
    from openrath_project.compat import OpenRathNameUnsupported

    with session_graph_mode_override(True):
        pass
    with (
        pytest.raises(OpenRathNameUnsupported, match="lineage"),
        session_graph_mode_override(False),
    ):
        pass


def test_graph_helpers_report_missing_parents_and_cycles():
    from openrath_project.session.graph import validate_acyclic

    class Node:
        def __init__(self, sid, parents):
            self.id, self.parent_session_ids = sid, tuple(parents)

    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    validate_acyclic({a: Node(a, []), b: Node(b, [a]), c: Node(c, [a, b])})
    with pytest.raises(LineageConsistencyError, match="not given"):
        validate_acyclic({b: Node(b, [a])})
    with pytest.raises(LineageConsistencyError, match="cycle"):
        validate_acyclic({a: Node(a, [c]), b: Node(b, [a]), c: Node(c, [b])})


def test_to_a_provider_binds_it_in_memory_only(project, tmp_path, monkeypatch):
    from openrath_project import flow

    session = Session.from_user_message("q", project=project)
    provider = flow.Provider("scripted", fixture=[{"text": "a"}])
    assert session.to(provider) is session
    assert session.provider is provider
    assert session.fork().provider is provider
    assert Session.load(session.id).provider is None  # never stored
    assert session.placement == {}
    monkeypatch.setenv("OPENRATH_HOME", str(tmp_path))
    with pytest.raises(KeyError, match="no llm.providers entry 'main'"):
        session.to(provider="main")
