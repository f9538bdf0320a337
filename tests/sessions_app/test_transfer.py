"""JSONL export/import: our format round-trips; OpenRath v1 logs and lineage rows import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openrath_project.errors import ValidationFailed
from sessions_app import context, services
from sessions_app.models import Chunk, LineageEdge, Session
from sessions_app.selectors import chunk_all
from sessions_app.transfer import export_graph, import_files
from tests.sessions_app.conftest import msg, texts

pytestmark = pytest.mark.django_db
V1 = Path(__file__).parent / "fixtures" / "v1"
BASE, A, B, M, P = (
    f"0b7d6a52-5c55-4c8e-9d4e-1d2a3b4c5d{x}" for x in ("01", "0a", "0b", "0c", "0d")
)


def _graph(project, make_session):
    root = make_session(["plan the launch"])
    with context.writing(agent="planner"):
        services.chunks_append(
            session=root,
            drafts=[
                msg(
                    "split into research and budget",
                    "assistant",
                    usage={"prompt_tokens": 12, "completion_tokens": 8},
                )
            ],
        )
    research = services.session_fork(session=root, title="research")
    budget = services.session_fork(session=root, title="budget", at=1)
    with context.writing(agent="researcher"):
        services.chunks_append(session=research, drafts=[msg("found 3 venues", "assistant")])
    services.chunks_append(session=budget, drafts=[msg("$10k", "assistant")])
    merged = services.session_merge(sessions=[research, budget], title="joined")
    services.session_detach(session=merged, title="handoff")
    return root


def _normalise(text: str) -> list[dict]:
    """Records with ids replaced by their order of appearance; import-only fields dropped."""
    records = [json.loads(line) for line in text.splitlines()]
    names: dict[str, str] = {}

    def name(value):
        if value is None:
            return None
        return names.setdefault(value, f"S{len(names)}")

    out = []
    for record in records:
        record = dict(record)
        record.pop("created_at", None)
        record.pop("exported_at", None)
        if record["type"] == "header":
            record["root"] = name(record["root"])
        elif record["type"] == "session":
            record["id"] = name(record["id"])
            record["base"] = name(record["base"])
            record.pop("provenance")
            record.pop("created_by")
        elif record["type"] == "chunk":
            record["session"] = name(record["session"])
            if record["branch"]:
                record["branch"] = name(record["branch"])
        elif record["type"] == "edge":
            record["parent"], record["child"] = name(record["parent"]), name(record["child"])
        out.append(record)
    return out


def test_round_trip_is_exact(project, make_session):
    root = _graph(project, make_session)
    first = "".join(export_graph(root))
    result = import_files(project=project, files=[("graph.jsonl", first)])
    assert len(result.sessions) == 5
    imported_root = result.mapping[str(root.id)]
    second = "".join(export_graph(imported_root))
    a, b = _normalise(first), _normalise(second)
    # the documented import transformations: roots become "import", content becomes untrusted
    for record in a:
        if record["type"] == "session" and record["op"] == "create":
            record["op"] = "import"
        if record["type"] == "chunk":
            record["trust"] = "untrusted"
    assert a == b
    # and a second round trip changes nothing at all
    again = import_files(project=project, files=[("again.jsonl", second)])
    third = "".join(export_graph(again.mapping[str(imported_root.id)]))
    assert _normalise(third) == b
    # storage stays copy-on-write after import
    for original, copy in result.mapping.items():
        source = Session.objects.get(id=original)
        assert (copy.base_len, copy.own_len) == (source.base_len, source.own_len)
        assert texts(copy) == texts(source)
    assert imported_root.provenance["original_id"] == str(root.id)
    assert all(c.trust == "untrusted" for c in chunk_all(imported_root.id))


def test_import_is_all_or_nothing(project, make_session):
    root = _graph(project, make_session)
    text = "".join(export_graph(root))
    lines = text.splitlines(keepends=True)
    before = (Session.objects.count(), Chunk.objects.count(), LineageEdge.objects.count())
    broken = [
        ("truncated.jsonl", "".join(lines[:-1])),
        (
            "garbage.jsonl",
            text.replace('"type":"chunk"', '"type":"chunk","role":1', 1).replace(
                '"role":"user"', '"role":"robot"', 1
            ),
        ),
        ("bad.jsonl", lines[0] + "{not json\n" + "".join(lines[1:])),
        ("empty.jsonl", "\n\n"),
        ("other.jsonl", '{"hello": "world"}\n'),
    ]
    messages = []
    for name, content in broken:
        with pytest.raises(ValidationFailed) as info:
            import_files(project=project, files=[("ok.jsonl", text), (name, content)])
        messages.append(info.value.message)
        assert (
            Session.objects.count(),
            Chunk.objects.count(),
            LineageEdge.objects.count(),
        ) == before
    assert "truncated export (no trailer)" in messages[0]
    assert "role" in messages[1]
    assert "bad.jsonl:2: invalid JSON" in messages[2]
    assert "empty file" in messages[3]
    assert "not a session export" in messages[4]


def _v1_files(*names):
    return [(name, (V1 / name).read_text()) for name in names]


V1_FILES = (f"{BASE}.jsonl", f"{A}.jsonl", f"{B}.jsonl", f"{M}.jsonl", f"{P}.jsonl.__partial__")


def test_v1_session_logs_import_with_lineage(project):
    result = import_files(project=project, files=_v1_files(*reversed(V1_FILES)))
    base, a, b, m, p = (result.mapping[x] for x in (BASE, A, B, M, P))
    # base: system, user, assistant text + tool call, tool result, assistant
    chunks = chunk_all(base.id)
    assert [(c.role, c.kind) for c in chunks] == [
        ("system", "message"),
        ("user", "message"),
        ("assistant", "message"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "message"),
    ]
    assert chunks[3].content == {
        "id": "call_1",
        "name": "get_weather",
        "arguments": {"city": "Paris"},
    }
    assert chunks[3].tool_call_id == "call_1"
    assert chunks[4].content == {
        "tool_call_id": "call_1",
        "name": "get_weather",
        "output": {"city": "Paris", "forecast": "sunny", "celsius": 21},
    }
    assert all(c.trust == "untrusted" for c in chunks)
    assert (base.op, base.incomplete, base.placement) == ("import", False, {})
    assert base.provenance["sandbox_spec"]["working_dir"] == "/tmp/or_ws"
    assert base.usage["total_tokens"] == 30
    # the fork shares the base's storage and adds only its own rows
    assert (a.op, a.base_id, a.base_len, a.own_len) == ("fork", base.id, 6, 4)
    a_chunks = chunk_all(a.id)
    assert a_chunks[8].content["error"] == "upstream timeout"
    assert [c.kind for c in a_chunks[6:]] == ["message", "tool_call", "tool_result", "message"]
    assert (b.base_id, b.base_len, b.own_len) == (base.id, 6, 2)
    # the merge: first parent's rows shared, the second's copied
    assert (m.op, m.base_id, m.base_len, m.own_len) == ("merge", a.id, 10, 8)
    edges = list(
        LineageEdge.objects.filter(child=m)
        .order_by("position")
        .values_list("parent_id", "op", "position")
    )
    assert edges == [(a.id, "merge", 0), (b.id, "merge", 1)]
    # the crashed writer: imported, marked incomplete, torn last line dropped
    assert p.incomplete is True
    assert p.provenance["closed"] is False
    assert texts(p)[-1] == "this one crashes"
    assert (p.base_id, p.base_len, p.own_len) == (a.id, 10, 1)
    assert LineageEdge.objects.get(child=p).op == "fork"
    # nothing is resumable: provenance says historical
    assert all(s.provenance["historical"] for s in result.sessions)


def test_v1_lineage_rows_add_structure(project):
    result = import_files(
        project=project, files=_v1_files(f"{BASE}.jsonl", f"{A}.jsonl", "lineage.jsonl")
    )
    user = result.mapping["0b7d6a52-5c55-4c8e-9d4e-1d2a3b4c5d00"]
    assert user.provenance["content_included"] is False
    assert user.own_len == 0
    base = result.mapping[BASE]
    parents = set(LineageEdge.objects.filter(child=base).values_list("parent_id", flat=True))
    assert parents == {user.id}
    assert LineageEdge.objects.filter(child=result.mapping[A]).count() == 1
    assert len(result.sessions) == 3


def test_v1_errors_name_file_and_line(project):
    bad_kind = (V1 / f"{BASE}.jsonl").read_text().replace('"kind": "user"', '"kind": "robot"')
    with pytest.raises(ValidationFailed, match=r"x.jsonl:3: invalid chunk kind"):
        import_files(project=project, files=[("x.jsonl", bad_kind)])
    headless = '{"record_type": "chunk", "index": 0, "kind": "user", "payload": {}}\n'
    with pytest.raises(ValidationFailed, match="chunk record before header"):
        import_files(project=project, files=[("y.jsonl", headless)])
    future = (
        (V1 / f"{BASE}.jsonl").read_text().replace('"schema_version": 1', '"schema_version": 9')
    )
    with pytest.raises(ValidationFailed, match="unsupported schema_version=9"):
        import_files(project=project, files=[("z.jsonl", future)])
    assert Session.objects.count() == 0


def test_flow_session_export_import(project, make_session, tmp_path):
    from sessions_app.value import Session as FlowSession

    root = FlowSession.load(_graph(project, make_session).id)
    path = tmp_path / "g.jsonl"
    root.export_jsonl(path)
    imported = FlowSession.import_jsonl(path, project=project)
    assert len(imported) == 5
    v1 = FlowSession.import_jsonl([V1 / name for name in V1_FILES], project="acme/research")
    assert len(v1) == 5
