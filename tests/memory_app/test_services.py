"""Memory services: remember (insert-once), recall (ranking, scopes, isolation), commit, forget."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from memory_app import bm25, facts, services
from memory_app.models import MAX_TEXT_CHARS, MemoryEntry, MemoryStats, MemoryTerm
from memory_app.selectors import RecallHit
from openrath_project.errors import PayloadTooLarge, ValidationFailed
from sessions_app import context
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.providers import ModelTurn, Provider, Usage, make_provider
from tests.factories import ProjectFactory
from tests.factories.memory import MemoryEntryFactory
from tests.memory_app.conftest import memory_state
from tests.memory_app.labelled import ENTRIES, EXPECTED, RELEVANT
from tests.support import require_postgres

pytestmark = pytest.mark.django_db


def remember(project, text, **kwargs):
    return services.memory_remember(project=project, text=text, **kwargs)


def recalled(project, query, **kwargs) -> list[str]:
    return [hit.text for hit in services.memory_recall(project=project, query=query, **kwargs)]


class TestRemember:
    def test_stores_the_fact_its_postings_and_counters(self, project):
        entry, created = remember(
            project, "  Deploys to production need two approvals.  ", metadata={"k": 1}
        )
        assert created is True
        entry.refresh_from_db()
        assert (
            entry.tenant_id,
            entry.project_id,
            entry.scope,
            entry.agent,
            entry.session_id,
            entry.text,
            entry.metadata,
            entry.trust,
            entry.fingerprint,
            entry.term_count,
            entry.created_by,
        ) == (
            project.tenant_id,
            project.id,
            "project",
            "",
            None,
            "Deploys to production need two approvals.",
            {"k": 1},
            "untrusted",
            facts.fingerprint("Deploys to production need two approvals."),
            5,
            "flow",
        )
        postings = sorted(MemoryTerm.objects.values_list("term", "place", "tf", "length"))
        assert postings == [
            ("approval", "p", 1, 5),
            ("deploy", "p", 1, 5),
            ("need", "p", 1, 5),
            ("production", "p", 1, 5),
            ("two", "p", 1, 5),
        ]
        assert list(MemoryStats.objects.values_list("place", "entries", "terms")) == [("p", 1, 5)]

    def test_a_duplicate_returns_the_stored_entry_and_writes_nothing(self, project):
        first, _ = remember(project, "Invoices are due in 30 days.", trust="trusted")
        before = memory_state()
        again, created = remember(project, "invoices ARE due in   30 days.", trust="untrusted")
        assert (created, again.id, again.text, again.trust) == (
            False,
            first.id,
            "Invoices are due in 30 days.",
            "trusted",
        )
        assert memory_state() == before

    def test_the_same_text_is_one_fact_per_place(self, project, make_session):
        session = make_session([("user", "hi")])
        other_session = make_session([("user", "hi")])
        text = "The build uses Python 3.11."
        places = [
            {},
            {"scope": "agent", "agent": "writer"},
            {"scope": "agent", "agent": "critic"},
            {"scope": "session", "session": session},
            {"scope": "session", "session": other_session},
        ]
        ids = {remember(project, text, **place)[0].id for place in places}
        assert len(ids) == 5
        assert {remember(project, text, **place)[1] for place in places} == {False}
        assert MemoryEntry.objects.count() == 5
        assert sorted(MemoryStats.objects.values_list("place", "entries")) == sorted(
            [
                ("p", 1),
                ("a:writer", 1),
                ("a:critic", 1),
                (f"s:{session.id.hex}", 1),
                (f"s:{other_session.id.hex}", 1),
            ]
        )

    def test_the_same_text_in_another_project_is_another_fact(self, project, other_project):
        a, _ = remember(project, "Same words.")
        b, created = remember(other_project, "Same words.")
        assert created is True
        assert a.id != b.id

    @pytest.mark.parametrize(
        ("kwargs", "error", "field"),
        [
            ({"text": ""}, ValidationFailed, "text"),
            ({"text": "   \n"}, ValidationFailed, "text"),
            ({"text": 42}, ValidationFailed, "text"),
            ({"text": "x" * (MAX_TEXT_CHARS + 1)}, PayloadTooLarge, "text"),
            ({"scope": "global"}, ValidationFailed, "scope"),
            ({"scope": "agent"}, ValidationFailed, "agent"),
            ({"scope": "agent", "agent": "  "}, ValidationFailed, "agent"),
            ({"agent": "writer"}, ValidationFailed, "agent"),
            ({"scope": "agent", "agent": "a" * 201}, ValidationFailed, "agent"),
            ({"scope": "session"}, ValidationFailed, "session"),
            ({"trust": "maybe"}, ValidationFailed, "trust"),
            ({"metadata": ["not", "a", "dict"]}, ValidationFailed, "metadata"),
            ({"metadata": {"blob": "x" * 20_000}}, PayloadTooLarge, "metadata"),
            ({"metadata": {"bad": object()}}, ValidationFailed, "metadata"),
            ({"metadata": {"x": float("nan")}}, ValidationFailed, "metadata"),
            ({"metadata": {"x": ["a\x00b"]}}, ValidationFailed, "metadata"),
            ({"text": "nul\x00byte"}, ValidationFailed, "text"),
            ({"source_seq": 3}, ValidationFailed, "source_seq"),
        ],
    )
    def test_bad_input_names_the_field_and_writes_nothing(self, project, kwargs, error, field):
        values: dict[str, Any] = {"text": "A fact."} | kwargs
        with pytest.raises(error) as caught:
            services.memory_remember(project=project, **values)
        assert list(caught.value.details) == [field]
        assert memory_state() == (0, 0, [])

    def test_sessions_must_belong_to_the_project(self, project, other_project, make_session):
        elsewhere = make_session([("user", "hi")], project=other_project)
        mine = make_session([("user", "hi")])
        with pytest.raises(ValidationFailed) as caught:
            remember(project, "A fact.", scope="session", session=elsewhere)
        assert caught.value.details == {"session": ["belongs to another project"]}
        with pytest.raises(ValidationFailed) as caught:
            remember(project, "A fact.", source_session=elsewhere, source_seq=0)
        assert caught.value.details == {"source_session": ["belongs to another project"]}
        with pytest.raises(ValidationFailed) as caught:
            remember(project, "A fact.", session=mine)
        assert caught.value.details == {"session": ["only allowed with scope session"]}
        with pytest.raises(ValidationFailed) as caught:
            remember(project, "A fact.", source_session=mine, source_seq=-1)
        assert caught.value.details == {"source_seq": ["must be a non-negative integer"]}
        assert memory_state() == (0, 0, [])

    @pytest.mark.parametrize(
        "fields",
        [
            {"scope": "agent", "agent": ""},
            {"scope": "project", "agent": "writer"},
            {"scope": "session"},
            {"scope": "nowhere"},
            {"text": ""},
            {"trust": "maybe"},
            {"fingerprint": "not-a-hash"},
        ],
    )
    def test_the_database_enforces_the_invariants(self, project, fields):
        values = {
            "tenant_id": project.tenant_id,
            "project": project,
            "text": "A fact.",
            "fingerprint": facts.fingerprint("A fact."),
        } | fields
        with pytest.raises(IntegrityError), transaction.atomic():
            MemoryEntry.objects.create(**values)

    def test_the_database_refuses_a_duplicate_fact(self, project):
        entry, _ = remember(project, "A fact.")
        with pytest.raises(IntegrityError), transaction.atomic():
            MemoryEntry.objects.create(
                tenant_id=project.tenant_id,
                project=project,
                text="a FACT.",
                fingerprint=entry.fingerprint,
            )


class TestRecall:
    @pytest.mark.parametrize("query", list(EXPECTED))
    def test_labelled_queries_return_the_expected_facts_in_order(self, labelled, project, query):
        hits = services.memory_recall(project=project, query=query, k=5)
        by_id = {entry_id: key for key, entry_id in labelled.items()}
        assert [by_id[hit.id] for hit in hits] == EXPECTED[query]
        assert set(EXPECTED[query][: len(RELEVANT[query])]) == RELEVANT[query]
        # The database sums the same formula as the pure module.
        pure = dict(bm25.rank(query, ENTRIES, k=5))
        assert [hit.score for hit in hits] == [
            pytest.approx(pure[by_id[hit.id]], rel=1e-6) for hit in hits
        ]
        assert all(hit.score > 0 for hit in hits)

    def test_a_hit_carries_what_an_agent_needs(self, project):
        entry, _ = remember(
            project, "Dana prefers email.", metadata={"source": "api"}, trust="trusted"
        )
        (hit,) = services.memory_recall(project=project, query="dana email", k=3)
        assert isinstance(hit, RecallHit)
        assert (hit.id, hit.text, hit.scope, hit.metadata, hit.trust, hit.agent) == (
            entry.id,
            "Dana prefers email.",
            "project",
            {"source": "api"},
            "trusted",
            "",
        )
        assert hit.created_at == entry.created_at
        with pytest.raises(AttributeError):
            hit.text = "changed"  # type: ignore[misc]

    def test_k_limits_and_ties_go_to_the_newest(self, project):
        ids = [remember(project, f"Release note {n}: shipped.")[0].id for n in range(4)]
        hits = services.memory_recall(project=project, query="shipped", k=2)
        assert [h.id for h in hits] == [ids[3], ids[2]]
        assert hits[0].score == hits[1].score

    @pytest.mark.parametrize("k", [0, -1, 51, "3", True, 2.5])
    def test_bad_k_is_refused(self, project, k):
        with pytest.raises(ValidationFailed) as caught:
            services.memory_recall(project=project, query="x", k=k)
        assert list(caught.value.details) == ["k"]

    def test_queries_without_terms_recall_nothing(self, labelled, project):
        assert services.memory_recall(project=project, query="", k=5) == []
        assert services.memory_recall(project=project, query="the of and ?!", k=5) == []
        assert services.memory_recall(project=project, query="zyzzyva", k=5) == []

    def test_a_very_long_query_uses_its_first_terms(self, labelled, project):
        query = "Redis outage " + " ".join(f"filler{i}" for i in range(5000))
        hits = services.memory_recall(project=project, query=query, k=1)
        assert [h.id for h in hits] == [labelled["incident-redis"]]

    def test_scopes(self, project, make_session):
        session, other = make_session([("user", "a")]), make_session([("user", "b")])
        remember(project, "Shared: the launch is in May.")
        remember(project, "Writer: the launch copy is due Monday.", scope="agent", agent="writer")
        remember(project, "Critic: the launch copy is too long.", scope="agent", agent="critic")
        remember(project, "This session: launch city is Lisbon.", scope="session", session=session)
        remember(project, "Other session: launch city is Porto.", scope="session", session=other)
        query = "launch"
        assert recalled(project, query, k=10) == ["Shared: the launch is in May."]
        # Agents pass their name and session whatever the scope: unused parts are ignored.
        assert recalled(project, query, k=10, agent="writer", session_id=session.id) == [
            "Shared: the launch is in May."
        ]
        assert sorted(recalled(project, query, k=10, scope="agent", agent="writer")) == [
            "Shared: the launch is in May.",
            "Writer: the launch copy is due Monday.",
        ]
        assert sorted(recalled(project, query, k=10, scope="session", session_id=session.id)) == [
            "Shared: the launch is in May.",
            "This session: launch city is Lisbon.",
        ]
        assert sorted(
            recalled(project, query, k=10, scope="session", session_id=str(other.id))
        ) == ["Other session: launch city is Porto.", "Shared: the launch is in May."]

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"scope": "agent"}, "agent"),
            ({"scope": "session"}, "session"),
            ({"scope": "session", "session_id": "not-a-uuid"}, "session"),
            ({"scope": "everything"}, "scope"),
        ],
    )
    def test_bad_scopes_name_the_field(self, project, kwargs, field):
        with pytest.raises(ValidationFailed) as caught:
            services.memory_recall(project=project, query="launch", **kwargs)
        assert list(caught.value.details) == [field]

    def test_memory_never_crosses_tenants_projects_or_agents(
        self, project, other_project, foreign_project, make_session
    ):
        text = "The vault code is 4711."
        mine, _ = remember(project, text)
        theirs, _ = remember(foreign_project, text)
        neighbours, _ = remember(other_project, text)
        agent_a, _ = remember(project, "Agent A: the vault code is 1234.", scope="agent", agent="a")
        session = make_session([("user", "x")], project=other_project)
        in_session, _ = remember(
            other_project, "Session: vault code 9.", scope="session", session=session
        )
        query = "vault code"

        def ids(project_, **kwargs):
            hits = services.memory_recall(project=project_, query=query, k=50, **kwargs)
            return {h.id for h in hits}

        assert ids(project) == {mine.id}
        assert ids(project, scope="agent", agent="b") == {mine.id}
        assert ids(project, scope="agent", agent="a") == {mine.id, agent_a.id}
        # Another project's session id does not open that project's memory.
        assert ids(project, scope="session", session_id=session.id) == {mine.id}
        assert ids(other_project, scope="session", session_id=session.id) == {
            neighbours.id,
            in_session.id,
        }
        assert ids(foreign_project, scope="agent", agent="a") == {theirs.id}

    def test_statistics_are_those_of_the_searched_places(self, project):
        # The same entry scores differently when the corpus around it differs: the idf and the
        # average length come from the searched places only.
        target, _ = remember(project, "Kafka retention is seven days.")
        for n in range(6):
            remember(project, f"Kafka topic {n} exists.", scope="agent", agent="ops")
        alone = services.memory_recall(project=project, query="kafka retention", k=1)[0]
        crowded = services.memory_recall(
            project=project, query="kafka retention", k=1, scope="agent", agent="ops"
        )[0]
        assert alone.id == crowded.id == target.id
        assert crowded.score != alone.score


class FixedProvider(Provider):
    """Answers every call with the same text and records the messages it was sent."""

    kind = "fixed"
    model = "fixed-1"

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.calls: list[list[dict[str, Any]]] = []

    def complete(self, messages, tools=None, *, on_delta=None) -> ModelTurn:
        self.calls.append(messages)
        return ModelTurn(
            text=self.text,
            tool_calls=(),
            usage=Usage(1, 1, 2),
            model=self.model,
            provider=self.kind,
            finish_reason="stop",
        )


def scripted(facts_: list[str]) -> Provider:
    return make_provider("scripted", fixture=[{"text": json.dumps(facts_)}])


class TestCommit:
    def test_commit_stores_each_fact_once_across_commits(self, project, make_session):
        session = make_session(
            [
                ("user", "We decided fact a today."),
                ("assistant", "Noted. And fact b holds too."),
            ]
        )
        first = services.memory_commit(
            session=session, provider=scripted(["fact a", "fact b", "fact a"])
        )
        assert [e.text for e in first] == ["fact a", "fact b"]
        assert [(e.scope, e.trust, e.source_session_id, e.source_seq) for e in first] == [
            ("project", "untrusted", session.id, 0),
            ("project", "untrusted", session.id, 1),
        ]
        assert first[0].metadata == {
            "source": "commit",
            "provider": "scripted",
            "model": "scripted-1",
        }
        before = memory_state()
        again = services.memory_commit(
            session=session, provider=scripted(["fact a", "fact b", "fact a"])
        )
        assert again == []
        assert memory_state() == before
        assert sorted(MemoryEntry.objects.values_list("text", flat=True)) == ["fact a", "fact b"]

    def test_facts_already_remembered_are_not_duplicated(self, project, make_session):
        session = make_session([("user", "fact a, fact b, fact c")])
        known, _ = remember(project, "FACT B", trust="trusted")
        created = services.memory_commit(
            session=session, provider=scripted(["fact a", "fact b", "fact c"])
        )
        assert [e.text for e in created] == ["fact a", "fact c"]
        assert MemoryEntry.objects.filter(fingerprint=facts.fingerprint("fact b")).get() == known
        assert MemoryEntry.objects.count() == 3

    def test_agent_and_session_scopes(self, project, make_session):
        session = make_session([("user", "remember the blue logo")])
        by_agent = services.memory_commit(
            session=session,
            provider=scripted(["The logo is blue."]),
            agent="designer",
            scope="agent",
        )
        assert [(e.scope, e.agent, e.session_id) for e in by_agent] == [("agent", "designer", None)]
        assert by_agent[0].metadata["agent"] == "designer"
        in_session = services.memory_commit(
            session=session,
            provider=scripted(["The logo is blue."]),
            agent="designer",
            scope="session",
        )
        assert [(e.scope, e.agent, e.session_id) for e in in_session] == [
            ("session", "", session.id)
        ]
        in_project = services.memory_commit(
            session=session, provider=scripted(["The logo is blue."]), agent="designer"
        )
        assert [(e.scope, e.agent) for e in in_project] == [("project", "")]
        assert MemoryEntry.objects.count() == 3

    def test_the_model_sees_an_instruction_and_the_numbered_transcript(self, project, make_session):
        session = make_session([("user", "My name is Ada."), ("assistant", "Hello Ada.")])
        session_services.chunks_append(
            session=session,
            drafts=[
                make_draft(
                    role="assistant",
                    kind="tool_call",
                    content={"id": "c1", "name": "lookup", "arguments": {"q": "Ada"}},
                ),
                make_draft(
                    role="tool",
                    kind="tool_result",
                    content={"tool_call_id": "c1", "name": "lookup", "output": "Ada Lovelace"},
                ),
                make_draft(role="assistant", kind="event", content={"type": "ignored"}),
            ],
        )
        provider = FixedProvider("- The user is Ada Lovelace.\n- The user is Ada Lovelace.")
        created = services.memory_commit(session=session, provider=provider, max_facts=3)
        assert [(e.text, e.source_seq) for e in created] == [("The user is Ada Lovelace.", 3)]
        ((system, user),) = provider.calls
        assert system["role"] == "system"
        assert "JSON list" in system["content"]
        assert "At most 3 facts." in system["content"]
        assert user == {
            "role": "user",
            "content": "Conversation:\n"
            "[0] user: My name is Ada.\n"
            "[1] assistant: Hello Ada.\n"
            '[2] assistant: called tool lookup with {"q": "Ada"}\n'
            "[3] tool: tool lookup returned Ada Lovelace",
        }

    def test_an_empty_session_makes_no_model_call(self, project, make_session):
        provider = FixedProvider('["never"]')
        assert services.memory_commit(session=make_session([]), provider=provider) == []
        assert provider.calls == []

    def test_max_facts_and_a_useless_answer(self, project, make_session):
        session = make_session([("user", "x")])
        created = services.memory_commit(
            session=session, provider=scripted(["a1", "a2", "a3"]), max_facts=2
        )
        assert [e.text for e in created] == ["a1", "a2"]
        assert services.memory_commit(session=session, provider=FixedProvider("Sorry!")) == []
        assert services.memory_commit(session=session, provider=FixedProvider(None)) == []
        for bad in (0, 101, True, "3"):
            with pytest.raises(ValidationFailed):
                services.memory_commit(session=session, provider=FixedProvider("[]"), max_facts=bad)

    def test_bad_scope_fails_before_the_model_call(self, project, make_session):
        provider = FixedProvider('["x"]')
        session = make_session([("user", "x")])
        with pytest.raises(ValidationFailed) as caught:
            services.memory_commit(session=session, provider=provider, scope="agent")
        assert caught.value.details == {"agent": ["required for scope agent"]}
        assert provider.calls == []


class TestForget:
    def test_forget_removes_the_entry_its_postings_and_its_counts(self, project):
        keep, _ = remember(project, "Keep this fact.")
        drop, _ = remember(project, "Drop this other fact please.")
        services.memory_forget(entry=drop)
        assert list(MemoryEntry.objects.values_list("id", flat=True)) == [keep.id]
        assert set(MemoryTerm.objects.values_list("entry_id", flat=True)) == {keep.id}
        assert list(MemoryStats.objects.values_list("place", "entries", "terms")) == [
            ("p", 1, keep.term_count)
        ]
        services.memory_forget(entry=drop)  # twice: nothing more changes
        assert MemoryStats.objects.get().entries == 1
        assert recalled(project, "other fact") == ["Keep this fact."]


@pytest.mark.django_db(transaction=True)
def test_concurrent_remembers_store_one_fact(tenant):
    require_postgres()
    project = ProjectFactory(tenant=tenant, slug="race")
    results: list[tuple[Any, bool]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        try:
            barrier.wait()
            results.append(services.memory_remember(project=project, text="One fact, once."))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(created for _, created in results) == [False] * 7 + [True]
    assert len({entry.id for entry, _ in results}) == 1
    assert MemoryEntry.objects.count() == 1
    assert list(MemoryStats.objects.values_list("entries", "terms")) == [(1, 2)]


class TestProvenance:
    """Who wrote a fact and where it came from, as memory_remember records them."""

    def test_the_author_is_the_write_context_unless_named(self, project):
        with context.writing(actor="run:42"):
            by_run, _ = remember(project, "Invoices are due in 30 days.")
        named, _ = remember(project, "Refunds need a ticket.", created_by="user:ada")
        assert (by_run.created_by, named.created_by) == ("run:42", "user:ada")

    def test_a_source_is_a_chunk_position_of_a_session_of_the_project(self, project, make_session):
        source = make_session([("user", "We ship on Fridays."), ("assistant", "Noted.")])
        entry, _ = remember(project, "We ship on Fridays.", source_session=source, source_seq=0)
        entry.refresh_from_db()
        assert (entry.source_session_id, entry.source_seq) == (source.id, 0)
        for bad, message in (
            (True, "must be a non-negative integer"),
            ("0", "must be a non-negative integer"),
            (2**31, "must be at most 2147483647"),
        ):
            with pytest.raises(ValidationFailed) as caught:
                remember(project, "Another fact.", source_session=source, source_seq=bad)
            assert caught.value.details == {"source_seq": [message]}
        assert memory_state()[0] == 1

    def test_recall_takes_only_text(self, project):
        MemoryEntryFactory(project=project, text="The staging database is small.")
        for query in (None, 7, ["staging"]):
            with pytest.raises(ValidationFailed) as caught:
                services.memory_recall(project=project, query=query)
            assert caught.value.details == {"query": ["must be a string"]}
        assert recalled(project, "staging database") == ["The staging database is small."]
