"""Session services: copy-on-write forks, detach, merge strategies, usage, fencing, context."""

from __future__ import annotations

import uuid

import pytest

from openrath_project.errors import ValidationFailed
from sessions_app import context, services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Chunk, LineageEdge, Session
from sessions_app.selectors import chunk_all, lineage_ids, project_usage, session_chain
from tests.factories import ProjectFactory
from tests.sessions_app.conftest import msg, texts

pytestmark = pytest.mark.django_db


def _counts():
    return Session.objects.count(), LineageEdge.objects.count(), Chunk.objects.count()


class TestFork:
    def test_fork_writes_one_row_and_one_edge_and_copies_nothing(self, make_session):
        root = make_session([f"m{i}" for i in range(50)])
        before = _counts()
        child = services.session_fork(session=root)
        assert _counts() == (before[0] + 1, before[1] + 1, before[2])
        assert (child.op, child.base_id, child.base_len, child.own_len) == ("fork", root.id, 50, 0)
        edge = LineageEdge.objects.get(child=child)
        assert (edge.parent_id, edge.op, edge.parent_len) == (root.id, "fork", 50)
        assert texts(child) == [f"m{i}" for i in range(50)]

    def test_branches_do_not_see_each_other(self, make_session):
        root = make_session(["a", "b"])
        child = services.session_fork(session=root)
        services.chunks_append(session=root, drafts=[msg("root-only")])
        services.chunks_append(session=child, drafts=[msg("child-only")])
        assert texts(root) == ["a", "b", "root-only"]
        assert texts(child) == ["a", "b", "child-only"]
        assert [c.seq for c in chunk_all(child.id)] == [0, 1, 2]
        stored = Chunk.objects.get(session=child)
        assert (stored.seq, stored.content["text"]) == (2, "child-only")

    def test_fork_at_a_length(self, make_session):
        root = make_session(["a", "b", "c", "d"])
        early = services.session_fork(session=root, at=2, title="early")
        assert texts(early) == ["a", "b"]
        assert early.title == "early"
        empty = services.session_fork(session=root, at=0)
        assert (empty.base_id, empty.base_len, texts(empty)) == (None, 0, [])
        for bad in (-1, 5, "2", True):
            with pytest.raises(ValidationFailed, match="between 0 and"):
                services.session_fork(session=root, at=bad)

    def test_deep_chains_stay_short_and_correct(self, make_session):
        root = make_session(["r0", "r1", "r2"])
        current = root
        expected = ["r0", "r1", "r2"]
        for depth in range(30):
            current = services.session_fork(session=current)
            services.chunks_append(session=current, drafts=[msg(f"d{depth}")])
            expected.append(f"d{depth}")
        assert texts(current) == expected
        assert len(session_chain(current.id)) == 31
        # forking deep inside the chain points straight at the holder of the last position
        shallow = services.session_fork(session=current, at=2)
        assert (shallow.base_id, shallow.base_len) == (root.id, 2)
        assert texts(shallow) == ["r0", "r1"]
        assert texts(current, upto=5) == ["r0", "r1", "r2", "d0", "d1"]


class TestDetach:
    def test_detach_is_a_new_root_with_the_same_content(self, make_session):
        root = make_session(["a", "b"])
        detached = services.session_detach(session=root, title="alone")
        assert detached.op == "detach"
        assert texts(detached) == ["a", "b"]
        assert Chunk.objects.filter(session=detached).count() == 0
        edge = LineageEdge.objects.get(child=detached)
        assert (edge.op, edge.parent_id) == ("detach", root.id)
        assert lineage_ids(detached, "ancestors") == [detached.id]
        assert set(lineage_ids(detached, "graph")) == {root.id, detached.id}
        services.chunks_append(session=root, drafts=[msg("later")])
        assert texts(detached) == ["a", "b"]


class TestMerge:
    def test_concat_after_the_common_ancestor_tags_branches(self, make_session):
        root = make_session(["q1", "q2", "q3"])
        left = services.session_fork(session=root)
        right = services.session_fork(session=root)
        services.chunks_append(
            session=left, drafts=[msg("L1", "assistant"), msg("L2", "assistant")]
        )
        services.chunks_append(session=right, drafts=[msg("R1", "assistant")])
        before = _counts()
        merged = services.session_merge(sessions=[left, right], strategy="concat", title="m")
        assert texts(merged) == ["q1", "q2", "q3", "L1", "L2", "R1"]
        assert [c.branch for c in chunk_all(merged.id)] == [
            "",
            "",
            "",
            str(left.id),
            str(left.id),
            str(right.id),
        ]
        assert (merged.op, merged.base_len, merged.own_len) == ("merge", 3, 3)
        assert merged.metadata == {"strategy": "concat", "common_prefix": 3}
        assert _counts() == (before[0] + 1, before[1] + 2, before[2] + 3)
        edges = list(
            LineageEdge.objects.filter(child=merged)
            .order_by("position")
            .values_list("parent_id", "op", "parent_len", "position")
        )
        assert edges == [(left.id, "merge", 5, 0), (right.id, "merge", 4, 1)]

    def test_unrelated_sessions_concatenate_whole(self, make_session):
        a = make_session(["a1"])
        b = make_session(["b1", "b2"])
        merged = services.session_merge(sessions=[a, b])
        assert texts(merged) == ["a1", "b1", "b2"]
        assert merged.metadata["common_prefix"] == 0
        assert merged.base_id is None

    def test_merge_of_a_fork_and_its_parent(self, make_session):
        root = make_session(["a", "b"])
        child = services.session_fork(session=root)
        services.chunks_append(session=child, drafts=[msg("c")])
        merged = services.session_merge(sessions=[child, root])
        assert texts(merged) == ["a", "b", "c"]

    def test_summary_strategy_uses_the_summarizer(self, make_session):
        root = make_session(["question"])
        left = services.session_fork(session=root)
        right = services.session_fork(session=root)
        services.chunks_append(session=left, drafts=[msg("yes", "assistant")])
        services.chunks_append(session=right, drafts=[msg("no", "assistant")])
        seen = []

        def summarize(branches):
            seen.append([[c.content["text"] for c in b.chunks] for b in branches])
            return services.SummaryResult(
                text="split decision",
                agent="judge",
                usage={"prompt_tokens": 7, "completion_tokens": 3},
            )

        merged = services.session_merge(
            sessions=[left, right], strategy="summary", summarizer=summarize
        )
        assert seen == [[["yes"], ["no"]]]
        chunks = chunk_all(merged.id)
        assert [(c.role, c.kind, c.agent) for c in chunks] == [
            ("user", "message", ""),
            ("assistant", "summary", "judge"),
        ]
        assert chunks[1].content == {
            "text": "split decision",
            "branches": [str(left.id), str(right.id)],
        }
        merged.refresh_from_db()
        assert merged.usage["total_tokens"] == 10

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (lambda a, b, c: {"sessions": [a]}, "at least two"),
            (lambda a, b, c: {"sessions": [a, a]}, "twice"),
            (lambda a, b, c: {"sessions": [a, c]}, "same project"),
            (lambda a, b, c: {"sessions": [a, b], "strategy": "vote"}, "strategy"),
            (lambda a, b, c: {"sessions": [a, b], "strategy": "summary"}, "summarizer"),
        ],
    )
    def test_bad_merges_change_nothing(self, make_session, tenant, build, message):
        a, b = make_session(["a"]), make_session(["b"])
        c = make_session(["c"], project=ProjectFactory(tenant=tenant, slug="elsewhere"))
        before = _counts()
        with pytest.raises(ValidationFailed, match=message):
            services.session_merge(**build(a, b, c))
        assert _counts() == before


class TestUsage:
    def test_usage_per_chunk_session_and_project(self, make_session, project):
        session = make_session(["hi"])
        services.chunks_append(
            session=session,
            drafts=[
                msg(
                    "a",
                    "assistant",
                    usage={"prompt_tokens": 100, "completion_tokens": 20, "cost_usd": 0.25},
                ),
            ],
        )
        fork = services.session_fork(session=session)
        services.chunks_append(
            session=fork,
            drafts=[
                msg("b", "assistant", usage={"prompt_tokens": 130, "completion_tokens": 10}),
            ],
        )
        services.session_merge(sessions=[session, fork])
        session.refresh_from_db()
        fork.refresh_from_db()
        assert session.usage == {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "cost_usd": 0.25,
        }
        assert fork.usage["total_tokens"] == 140
        assert project_usage(project) == {
            "prompt_tokens": 230,
            "completion_tokens": 30,
            "total_tokens": 260,
            "cost_usd": 0.25,
            "sessions": 3,
        }


class TestFence:
    def test_only_the_current_lease_holder_appends(self, make_session):
        session = make_session(["a"])
        run = uuid.uuid4()
        assert services.session_claim_writer(session=session, run_id=run, token=1)
        with pytest.raises(services.SessionBusy):
            services.chunks_append(session=session, drafts=[msg("intruder")])
        services.chunks_append(session=session, drafts=[msg("t1")], fence=context.Fence(run, 1))
        assert services.session_claim_writer(session=session, run_id=run, token=2)
        with pytest.raises(services.StaleFence):
            services.chunks_append(
                session=session, drafts=[msg("stale")], fence=context.Fence(run, 1)
            )
        assert not services.session_claim_writer(session=session, run_id=uuid.uuid4(), token=9)
        assert not services.session_claim_writer(session=session, run_id=run, token=1)
        with context.writing(fence=context.Fence(run, 2)):
            services.chunks_append(session=session, drafts=[msg("t2")])
        services.session_release_writer(session_id=session.id, run_id=run)
        services.chunks_append(session=session, drafts=[msg("free")])
        assert texts(session) == ["a", "t1", "t2", "free"]


class TestContext:
    def test_writes_are_tagged_with_agent_run_and_step(self, make_session):
        session = make_session(["a"])
        run = uuid.uuid4()
        with context.writing(agent="planner", run_id=run, step="plan", actor="run:x"):
            services.chunks_append(session=session, drafts=[msg("plan", "assistant")])
            branch = services.session_fork(session=session)
        chunk = chunk_all(session.id)[-1]
        assert (chunk.agent, chunk.run_id, chunk.step) == ("planner", run, "plan")
        assert (branch.agent, branch.run_id, branch.step, branch.created_by) == (
            "planner",
            run,
            "plan",
            "run:x",
        )
        edge = LineageEdge.objects.get(child=branch)
        assert (edge.agent, edge.run_id, edge.step) == ("planner", run, "plan")
        explicit = make_draft(role="assistant", content={"text": "x"}, agent="critic")
        with context.writing(agent="planner"):
            services.chunks_append(session=session, drafts=[explicit])
        assert chunk_all(session.id)[-1].agent == "critic"


def test_compress_keeps_a_reference_to_what_it_replaced(make_session):
    session = make_session(["long", "history"])
    compressed = services.session_compress(
        session=session,
        result=services.SummaryResult(
            text="short", agent="compressor", usage={"prompt_tokens": 9, "completion_tokens": 2}
        ),
    )
    assert compressed.op == "compress"
    assert texts(compressed) == ["short"]
    assert compressed.metadata["replaces"] == {"session": str(session.id), "length": 2}
    assert compressed.metadata["usage_of_compression"] == {
        "prompt_tokens": 9,
        "completion_tokens": 2,
    }
    edge = LineageEdge.objects.get(child=compressed)
    assert (edge.parent_id, edge.op, edge.parent_len) == (session.id, "compress", 2)


class TestCreate:
    def test_create_writes_the_chunks_their_usage_and_the_write_context(self, project):
        run = uuid.uuid4()
        drafts = [
            msg("question"),
            msg("answer", "assistant", usage={"prompt_tokens": 7, "completion_tokens": 3}),
        ]
        with context.writing(actor="user:ada", agent="helper", run_id=run, step="ask"):
            session = services.session_create(
                project=project, title="t" * 400, chunks=drafts, metadata={"k": "v"}
            )
        session.refresh_from_db()
        assert (session.tenant_id, session.op, session.length, len(session.title)) == (
            project.tenant_id,
            "create",
            2,
            300,
        )
        assert (session.created_by, session.agent, session.run_id, session.metadata) == (
            "user:ada",
            "helper",
            run,
            {"k": "v"},
        )
        assert session.usage == {
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "total_tokens": 10,
            "cost_usd": 0.0,
        }
        stored = chunk_all(session.id)
        assert [(c.seq, c.role, c.agent, c.run_id, c.step) for c in stored] == [
            (0, "user", "helper", run, "ask"),
            (1, "assistant", "helper", run, "ask"),
        ]

    def test_too_many_chunks_are_refused_and_nothing_is_written(self, project):
        before = _counts()
        drafts = [msg("x")] * (services.MAX_CHUNKS_PER_APPEND + 1)
        with pytest.raises(ValidationFailed) as caught:
            services.session_create(project=project, chunks=drafts)
        assert caught.value.details == {"chunks": ["more than 1000"]}
        assert _counts() == before

    def test_from_a_user_message_the_title_is_its_start(self, project):
        long = "Summarise the incident report " + "with every detail " * 10
        session = services.session_from_user_message(project=project, text=long)
        assert (session.title, texts(session)) == (long[:80], [long])
        assert chunk_all(session.id)[0].role == "user"
        titled = services.session_from_user_message(project=project, text="hi", title="Greeting")
        assert titled.title == "Greeting"


class TestAppend:
    def test_nothing_to_append_writes_nothing(self, make_session):
        session = make_session(["a"])
        before = _counts()
        assert services.chunks_append(session=session, drafts=[]) == []
        assert _counts() == before

    def test_too_many_chunks_in_one_append_are_refused(self, make_session):
        session = make_session(["a"])
        with pytest.raises(ValidationFailed) as caught:
            services.chunks_append(
                session=session, drafts=[msg("x")] * (services.MAX_CHUNKS_PER_APPEND + 1)
            )
        assert caught.value.details == {"chunks": ["more than 1000"]}
        assert texts(session) == ["a"]

    def test_a_steps_appends_are_held_until_flushed_and_reads_see_them(self, make_session):
        session = make_session(["a"])
        other = make_session(["elsewhere"])
        buffer = context.StepBuffer(session.id, session.tenant_id, 1, flush_after=3600)
        with context.writing(buffer=buffer):
            held = services.chunks_append(session=session, drafts=[msg("b"), msg("c")])
            assert [c.seq for c in held] == [1, 2]
            assert Chunk.objects.filter(session=session).count() == 1  # not written yet
            services.chunks_append(session=other, drafts=[msg("direct")])  # another session
            assert texts(other) == ["elsewhere", "direct"]
            services.flush_buffer(session_id=other.id)  # not the buffered session: no-op
            assert Chunk.objects.filter(session=session).count() == 1
            # A fork is a read of the session: it sees the step's own writes first.
            fork = services.session_fork(session=session)
            assert buffer.drafts == []
            services.flush_buffer(session_id=session.id)  # nothing left: no-op
        assert texts(session) == ["a", "b", "c"]
        assert texts(fork) == ["a", "b", "c"]
        assert [c.seq for c in chunk_all(session.id)] == [0, 1, 2]


class TestPlace:
    def test_a_relative_workspace_lives_under_the_projects_root(self, make_session, project):
        session = make_session(["a"])
        root = services.project_workspace_root(tenant_id=project.tenant_id, project_id=project.id)
        services.session_place(session=session, backend="local", spec="notes")
        assert Session.objects.get(id=session.id).placement == {
            "backend": "local",
            "spec": str(root / "notes"),
        }
        services.session_place(session=session, backend="local")
        assert session.placement == {"backend": "local", "spec": str(root / str(session.id))}
        assert Session.objects.get(id=session.id).placement == session.placement

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"backend": ""}, "backend"),
            ({"backend": "docker-compose"}, "backend"),
            ({"backend": "local", "spec": "../escape"}, "spec"),
            ({"backend": "local", "spec": 42}, "spec"),
            ({"backend": "local", "spec": "a\x00b"}, "spec"),
            ({"backend": "local", "spec": "ws", "policy": {"max_cals": 1}}, "policy"),
        ],
    )
    def test_a_bad_placement_names_the_field_and_keeps_the_old_one(
        self, make_session, kwargs, field
    ):
        session = make_session(["a"])
        services.session_place(session=session, backend="local", spec="/srv/kept")
        with pytest.raises(ValidationFailed) as caught:
            services.session_place(session=session, **kwargs)
        assert list(caught.value.details) == [field]
        assert Session.objects.get(id=session.id).placement == {
            "backend": "local",
            "spec": "/srv/kept",
        }
