"""Eager composition: workflow path tagging and lineage, Selector, Compressor, summaries."""

from __future__ import annotations

import copy
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from sessions_app import context, services
from sessions_app.agents import Agent
from sessions_app.composition import (
    DEFAULT_SELECT_INSTRUCTION,
    EmptyWorkflow,
    Selection,
    Selector,
    SelectorReplayError,
    parse_selection,
)
from sessions_app.compressor import (
    DEFAULT_COMPRESS_INSTRUCTION,
    DEFAULT_MERGE_INSTRUCTION,
    Compressor,
    EmptySummary,
)
from sessions_app.models import LineageEdge
from sessions_app.models import Session as SessionRow
from sessions_app.providers import DeltaCallback, ModelTurn, Provider, make_provider
from sessions_app.summaries import default_summarizer
from sessions_app.value import Session
from sessions_app.workflow import Workflow, workflow_path

SCRIPTED = {"model": "scripted-1", "provider": "scripted"}


def spent(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        **SCRIPTED,
    }


def _u(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


class Recording(Provider):
    """Wraps a provider and keeps a copy of every request it was sent."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.model = inner.model
        self.requests: list[list[dict[str, Any]]] = []

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelTurn:
        self.requests.append(copy.deepcopy(messages))
        return self.inner.complete(messages, tools, on_delta=on_delta)


class MustNotBeAsked(Provider):
    kind = "forbidden"
    model = "none"

    def complete(self, messages: Any, tools: Any = None, *, on_delta: Any = None) -> ModelTurn:
        raise AssertionError("the model must not be asked")


def scripted(*turns: dict[str, Any]) -> Recording:
    return Recording(make_provider("scripted", turns=list(turns)))


def answers(*texts: str) -> Recording:
    return scripted(*({"text": text, "usage": _u(9, 1)} for text in texts))


# --- nested workflows and lineage ----------------------------------------------------------------


class Research(Workflow):
    description = "Research a question from two angles."

    def __init__(self, provider: Provider) -> None:
        super().__init__()
        self.optimist = Agent("Argue the upside.", provider, name="optimist")
        self.skeptic = Agent("Argue the downside.", provider, name="skeptic")
        self.compress = Compressor(provider)

    def forward(self, session: Session) -> Session:
        # Each agent returns a new session (a fork of ``session``): no explicit fork needed.
        up = self.optimist(session)
        down = self.skeptic(session)
        return self.compress(Session.merge(up, down, title="both views"))


class Review(Workflow):
    name = "review"

    def __init__(self, provider: Provider) -> None:
        super().__init__()
        self.research = Research(provider)
        self.reviewer = Agent("Review the findings.", provider, name="reviewer")

    def forward(self, session: Session) -> Session:
        return self.reviewer(self.research(session))


def test_nested_workflows_produce_an_exactly_tagged_lineage_graph(project: Any) -> None:
    provider = scripted(
        {"text": "Postgres scales.", "usage": _u(10, 3)},
        {"text": "Postgres needs a server.", "usage": _u(11, 4)},
        {"text": "One side says it scales, the other that it needs a server.", "usage": _u(30, 9)},
        {"text": "Both points hold.", "usage": _u(20, 4)},
    )
    root = Session.from_user_message("Should we use Postgres?", project=project)

    result = Review(provider)(root)

    graph = root.lineage()
    nodes = graph.nodes
    question_title = "Should we use Postgres?"
    assert [(n.op, n.agent, n.workflow, n.title) for n in nodes] == [
        ("create", "", "", question_title),
        ("fork", "optimist", "review/Research", question_title),
        ("fork", "skeptic", "review/Research", question_title),
        ("merge", "", "review/Research", "both views"),
        ("compress", "compressor", "review/Research", "summary of both views"),
        ("fork", "reviewer", "review", "summary of both views"),
    ]
    root_row, up, down, merged, compressed, reviewed = nodes
    assert result.id == reviewed.id
    assert [Session.load(n.id).lineage_kind.name for n in (up, down, reviewed)] == [
        "OP_SESSION_LOOP"
    ] * 3
    assert len(root) == 1  # every agent left the session it was given as it was
    order = [n.id for n in nodes]
    edges = sorted(graph.edges, key=lambda e: (order.index(e.child_id), e.position))
    assert [
        (e.parent_id, e.child_id, e.op, e.parent_len, e.position, e.agent, e.workflow)
        for e in edges
    ] == [
        (root_row.id, up.id, "fork", 1, 0, "optimist", "review/Research"),
        (root_row.id, down.id, "fork", 1, 0, "skeptic", "review/Research"),
        (up.id, merged.id, "merge", 2, 0, "", "review/Research"),
        (down.id, merged.id, "merge", 2, 1, "", "review/Research"),
        (merged.id, compressed.id, "compress", 3, 0, "compressor", "review/Research"),
        (compressed.id, reviewed.id, "fork", 1, 0, "reviewer", "review"),
    ]

    def authored(session_id: uuid.UUID) -> list[tuple[str, str, str, str, str]]:
        return [
            (c.role, c.kind, c.text or "", c.agent, c.branch)
            for c in Session.load(session_id).chunks
        ]

    question = ("user", "message", "Should we use Postgres?", "", "")
    assert authored(up.id) == [
        question,
        ("assistant", "message", "Postgres scales.", "optimist", ""),
    ]
    assert authored(down.id) == [
        question,
        ("assistant", "message", "Postgres needs a server.", "skeptic", ""),
    ]
    assert authored(merged.id) == [
        question,
        ("assistant", "message", "Postgres scales.", "optimist", str(up.id)),
        ("assistant", "message", "Postgres needs a server.", "skeptic", str(down.id)),
    ]
    summary = (
        "user",
        "summary",
        "One side says it scales, the other that it needs a server.",
        "compressor",
        "",
    )
    assert authored(compressed.id) == [summary]
    assert authored(reviewed.id) == [
        summary,
        ("assistant", "message", "Both points hold.", "reviewer", ""),
    ]
    # Each token is counted once, on the session whose chunk spent it: the merge copied
    # chunks without spending, and each fork holds only its own turn's usage.
    assert [Session.load(n.id).usage["total_tokens"] for n in nodes] == [0, 13, 15, 0, 39, 24]
    # The reviewer saw the summary, not the branches.
    assert provider.requests[3] == [
        {"role": "system", "content": "Review the findings."},
        {
            "role": "user",
            "content": "[summary] One side says it scales, the other that it needs a server.",
        },
    ]
    assert context.current().workflow == ""


def test_workflow_paths_nest_and_keep_the_rest_of_the_context() -> None:
    seen: list[tuple[str, str, str]] = []

    class Inner(Workflow):
        def forward(self, session: Any) -> Any:
            ctx = context.current()
            seen.append((ctx.workflow, ctx.agent, ctx.step))
            return session + "!"

    class Outer(Workflow):
        name = "outer"

        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def forward(self, session: Any) -> Any:
            return self.inner(self.inner(session))

    with context.writing(agent="a", step="s1"):
        assert Outer()("x") == "x!!"

    assert seen == [("outer/Inner", "a", "s1")] * 2
    assert workflow_path("", "w") == "w"
    assert workflow_path("a/b", "c") == "a/b/c"
    long = workflow_path("x" * 300, "tail")
    assert (len(long), long[0], long[-5:]) == (300, "…", "/tail")


# --- Selector -------------------------------------------------------------------------------------


class SmallTalk(Workflow):
    name = "small_talk"
    description = "Chat about anything."

    def forward(self, session: Session) -> Session:
        session.append("Nice weather!", role="assistant")
        return session


class DeepDive(Workflow):
    description = "Research a question in depth."

    def forward(self, session: Session) -> Session:
        session.append("Researching.", role="assistant")
        return session


MENU = [
    {"index": 0, "name": "small_talk", "description": "Chat about anything."},
    {"index": 1, "name": "DeepDive", "description": "Research a question in depth."},
]


def decision(**fields: Any) -> dict[str, Any]:
    return {"type": "selector.decision", "selector": "router", "menu": MENU, **fields}


def events(session: Session) -> list[tuple[Any, ...]]:
    return [(c.content, c.agent, c.usage) for c in session.chunks if c.kind == "event"]


def test_a_selection_is_recorded_and_returns_the_workflow(project: Any) -> None:
    provider = answers("1")
    session = Session.from_user_message("How do B-trees split?", project=project)
    selector = Selector([SmallTalk(), DeepDive()], provider, name="router")

    chosen = selector(session)
    session = chosen(session)

    assert isinstance(chosen, DeepDive)
    assert provider.requests == [
        [
            {
                "role": "system",
                "content": f"{DEFAULT_SELECT_INSTRUCTION}\n\nWorkflows:\n"
                "0. small_talk — Chat about anything.\n"
                "1. DeepDive — Research a question in depth.",
            },
            {"role": "user", "content": "How do B-trees split?"},
        ]
    ]
    assert [(c.role, c.kind, c.agent, c.trust) for c in session.chunks] == [
        ("user", "message", "", "trusted"),
        ("assistant", "event", "router", "trusted"),
        ("assistant", "message", "", "trusted"),
    ]
    assert events(session) == [
        (
            decision(
                answer="1",
                choice="DeepDive",
                index=1,
                fallback=False,
                reason="the model chose index 1",
                key="selector:router:0",
                source="model",
            ),
            "router",
            spent(9, 1),
        )
    ]
    assert session.chunks[2].text == "Researching."


def test_openrath_call_form_and_a_json_answer(project: Any) -> None:
    session = Session.from_user_message("Hi!", project=project)
    selector = Selector(answers('{"choice": "small_talk"}'), name="router")

    chosen = selector.forward(session, SmallTalk(), DeepDive())

    assert isinstance(chosen, SmallTalk)
    (content, _agent, _usage) = events(session)[0]
    assert (content["choice"], content["index"], content["fallback"], content["reason"]) == (
        "small_talk",
        0,
        False,
        "the model named 'small_talk'",
    )


def test_an_unusable_answer_chooses_no_workflow_and_says_so(project: Any) -> None:
    # OpenRath 2.0: -1, an unparseable answer or an index off the menu is an EmptyWorkflow
    # (it used to fall back to the first workflow, so a `while` over the selector never ended).
    session = Session.from_user_message("Hm.", project=project)
    selector = Selector(
        [SmallTalk(), DeepDive()], answers("Both look fine.", "7", "-1"), name="router"
    )

    chosen = [selector(session) for _ in range(3)]

    assert [type(c) for c in chosen] == [EmptyWorkflow] * 3
    length = len(session.refresh())
    assert chosen[0](session) is session
    assert len(session.refresh()) == length
    assert [content for content, _, _ in events(session)] == [
        decision(
            answer="Both look fine.",
            choice=None,
            index=-1,
            fallback=True,
            reason="the answer 'Both look fine.' is not an index or a workflow name; "
            "no workflow chosen",
            key="selector:router:0",
            source="model",
        ),
        decision(
            answer="7",
            choice=None,
            index=-1,
            fallback=True,
            reason="the answer '7' is off the menu (indexes 0..1); no workflow chosen",
            key="selector:router:1",
            source="model",
        ),
        decision(
            answer="-1",
            choice=None,
            index=-1,
            fallback=False,
            reason="the model answered -1 (no workflow applies)",
            key="selector:router:2",
            source="model",
        ),
    ]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("1", Selection(1, False, "the model chose index 1")),
        (" `1`. ", Selection(1, False, "the model chose index 1")),
        ("DeepDive", Selection(1, False, "the model named 'DeepDive'")),
        ('"small_talk"', Selection(0, False, "the model named 'small_talk'")),
        ('{"choice": 1}', Selection(1, False, "the model chose index 1")),
        ('{"choice": "DeepDive"}', Selection(1, False, "the model named 'DeepDive'")),
        (
            '{"pick": 1}',
            Selection(-1, True, """the JSON answer '{"pick": 1}' has no 'choice'; """ + "FB"),
        ),
        (
            '{"choice": true}',
            Selection(
                -1, True, """the answer '{"choice": true}' is not an index or a workflow name; FB"""
            ),
        ),
        ("-1", Selection(-1, False, "the model answered -1 (no workflow applies)")),
        ('{"choice": -1}', Selection(-1, False, "the model answered -1 (no workflow applies)")),
        ("I would pick 1.", Selection(1, False, "the model chose index 1")),
        ("None fits: -1", Selection(-1, False, "the model answered -1 (no workflow applies)")),
        (
            "Option 9",
            Selection(-1, True, "the answer 'Option 9' is not an index or a workflow name; FB"),
        ),
        ("2", Selection(-1, True, "the answer '2' is off the menu (indexes 0..1); FB")),
        (
            "deepdive",
            Selection(-1, True, "the answer 'deepdive' is not an index or a workflow name; FB"),
        ),
        ("", Selection(-1, True, "the model gave no answer; FB")),
        (None, Selection(-1, True, "the model gave no answer; FB")),
    ],
)
def test_parse_selection(answer: str | None, expected: Selection) -> None:
    fallback = "no workflow chosen"
    want = Selection(expected.index, expected.fallback, expected.reason.replace("FB", fallback))
    assert parse_selection(answer, ["small_talk", "DeepDive"]) == want


def test_replay_reuses_recorded_decisions_without_the_model(project: Any) -> None:
    recorded = Session.from_user_message("Tell me about B-trees.", project=project)
    Selector([SmallTalk(), DeepDive()], answers("0"), name="other")(recorded)
    first = Selector([SmallTalk(), DeepDive()], answers("1", "nonsense"), name="router")
    first(recorded)
    first(recorded)

    fresh = Session.from_user_message("Tell me about B-trees.", project=project)
    replaying = Selector(
        [SmallTalk(), DeepDive()], MustNotBeAsked(), name="router", replay=recorded
    )

    assert isinstance(replaying(fresh), DeepDive)
    assert isinstance(replaying(fresh), EmptyWorkflow)
    with pytest.raises(SelectorReplayError) as caught:
        replaying(fresh)

    assert str(caught.value) == (
        f"selector 'router': session {recorded.id} recorded 2 decision(s) of this selector; "
        "selection 3 has none left to replay"
    )
    assert events(fresh) == [
        (
            decision(
                answer="1",
                choice="DeepDive",
                index=1,
                fallback=False,
                reason="the model chose index 1",
                key="selector:router:0",
                source="replay",
            ),
            "router",
            None,
        ),
        (
            decision(
                answer="nonsense",
                choice=None,
                index=-1,
                fallback=True,
                reason="the answer 'nonsense' is not an index or a workflow name; "
                "no workflow chosen",
                key="selector:router:1",
                source="replay",
            ),
            "router",
            None,
        ),
    ]


class MemoryDecisions:
    """An in-memory DecisionStore (the durable runtime gives each step attempt one)."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = dict(values or {})
        self.recalled: list[str] = []

    def recall(self, key: str) -> Any | None:
        self.recalled.append(key)
        return copy.deepcopy(self.values.get(key))

    def record(self, key: str, value: Any) -> None:
        self.values[key] = copy.deepcopy(value)


def test_a_decision_store_records_and_a_replayed_step_reuses(project: Any) -> None:
    run_id = uuid.uuid4()
    session = Session.from_user_message("B-trees?", project=project)
    selector = Selector([SmallTalk(), DeepDive()], answers("1", "0"), name="router")
    first_attempt = MemoryDecisions()

    with context.writing(run_id=run_id, step="route", decisions=first_attempt):
        picks = [type(selector(session)).__name__, type(selector(session)).__name__]

    assert picks == ["DeepDive", "SmallTalk"]
    assert first_attempt.recalled == ["selector:router:0", "selector:router:1"]
    assert first_attempt.values == {
        "selector:router:0": {
            "answer": "1",
            "choice": "DeepDive",
            "index": 1,
            "fallback": False,
            "reason": "the model chose index 1",
        },
        "selector:router:1": {
            "answer": "0",
            "choice": "small_talk",
            "index": 0,
            "fallback": False,
            "reason": "the model chose index 0",
        },
    }

    # A retried step: a new store holding the recorded decisions; the same selector instance
    # (its scripted provider is used up, so asking the model would raise) and a new one.
    for replaying in (
        selector,
        Selector([SmallTalk(), DeepDive()], MustNotBeAsked(), name="router"),
    ):
        retry = MemoryDecisions(first_attempt.values)
        with context.writing(run_id=run_id, step="route", decisions=retry):
            picks = [type(replaying(session)).__name__, type(replaying(session)).__name__]
        assert picks == ["DeepDive", "SmallTalk"]
        assert retry.recalled == ["selector:router:0", "selector:router:1"]

    sources = [(c.content["key"], c.content["source"], c.run) for c in session.chunks[1:]]
    assert sources == [
        ("selector:router:0", "model", str(run_id)),
        ("selector:router:1", "model", str(run_id)),
        *[
            ("selector:router:0", "decision_store", str(run_id)),
            ("selector:router:1", "decision_store", str(run_id)),
        ]
        * 2,
    ]


def test_selector_configuration_and_stale_decisions_are_clear_errors(project: Any) -> None:
    session = Session.from_user_message("x", project=project)
    # OpenRath: an empty menu is nothing to do (no model call, nothing recorded).
    assert isinstance(Selector(answers("0"))(session), EmptyWorkflow)
    assert len(session.refresh()) == 1
    with pytest.raises(ValueError, match="^selector 'selector' has no workflows to choose from$"):
        Selector()(session)
    with pytest.raises(
        ValueError,
        match="^selector 'selector': workflow names must be unique on the menu; "
        "repeated: small_talk$",
    ):
        Selector([SmallTalk(), SmallTalk()], answers("0"))
    stale = MemoryDecisions({"selector:router:0": {"choice": "gone"}})
    with context.writing(decisions=stale), pytest.raises(SelectorReplayError) as off_menu:
        Selector([SmallTalk()], MustNotBeAsked(), name="router")(session)
    assert str(off_menu.value) == (
        "selector 'router': the stored decision 'selector:router:0' chose 'gone', "
        "which is not on the menu ['small_talk']"
    )
    garbage = MemoryDecisions({"selector:router:0": "DeepDive"})
    with context.writing(decisions=garbage), pytest.raises(SelectorReplayError) as malformed:
        Selector([SmallTalk()], MustNotBeAsked(), name="router")(session)
    assert str(malformed.value) == (
        "selector 'router': the decision store holds 'DeepDive' for 'selector:router:0', "
        "which is not a selector decision"
    )
    assert len(session) == 1


# --- Compressor ----------------------------------------------------------------------------------


def conversation(project: Any) -> Session:
    return Session.create(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Plan a trip to Oslo."},
            {
                "role": "assistant",
                "content": "Checking trains.",
                "usage": {"prompt_tokens": 7, "completion_tokens": 3},
            },
            {
                "role": "assistant",
                "kind": "tool_call",
                "content": {"id": "c1", "name": "trains", "arguments": {"to": "Oslo"}},
            },
            {
                "role": "tool",
                "kind": "tool_result",
                "content": {"tool_call_id": "c1", "name": "trains", "output": "08:15"},
            },
        ],
        project=project,
        title="trip",
    )


def test_compress_makes_a_new_root_with_the_summary_and_records_usage(project: Any) -> None:
    provider = scripted({"text": "Take the 08:15 train.", "usage": _u(50, 6)})
    session = conversation(project)

    compressed = Compressor(provider)(session)

    transcript = (
        "user: Plan a trip to Oslo.\n"
        "assistant: Checking trains.\n"
        'assistant called trains({"to": "Oslo"})\n'
        "tool trains returned: 08:15"
    )
    assert provider.requests == [
        [
            {"role": "system", "content": DEFAULT_COMPRESS_INSTRUCTION},
            {"role": "user", "content": transcript},
        ]
    ]
    row = SessionRow.objects.get(id=compressed.id)
    assert (row.op, row.base_id, row.base_len, row.own_len, row.agent, row.title) == (
        "compress",
        None,
        0,
        2,
        "compressor",
        "summary of trip",
    )
    assert [(c.role, c.kind, c.content, c.agent, c.trust, c.usage) for c in compressed.chunks] == [
        # The copy is written by the compressor: the services stamp unauthored copies with the
        # writing agent (as merges do).
        ("system", "message", {"text": "Be brief."}, "compressor", "trusted", None),
        (
            "user",
            "summary",
            {"text": "Take the 08:15 train."},
            "compressor",
            "trusted",
            spent(50, 6),
        ),
    ]
    (edge,) = LineageEdge.objects.filter(child_id=compressed.id)
    assert (edge.parent_id, edge.op, edge.parent_len, edge.agent) == (
        session.id,
        "compress",
        5,
        "compressor",
    )
    # What an agent would send, estimated as characters // 4, before and after.
    before_chars = (
        len("Be brief.")
        + len("Plan a trip to Oslo.")
        + len("Checking trains.")
        + len("trains")
        + len('{"to": "Oslo"}')
        + len("08:15")
    )
    after_chars = len("Be brief.") + len("[summary] Take the 08:15 train.")
    assert compressed.metadata == {
        "replaces": {"session": str(session.id), "length": 5},
        "usage_before": {
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "total_tokens": 10,
            "cost_usd": 0.0,
        },
        "usage_of_compression": spent(50, 6),
        "context_tokens_before": before_chars // 4,
        "usage_after": {"context_tokens": after_chars // 4},
    }
    assert (before_chars // 4, after_chars // 4) == (17, 10)
    assert compressed.usage == {
        "prompt_tokens": 50,
        "completion_tokens": 6,
        "total_tokens": 56,
        "cost_usd": 0.0,
    }


def test_without_keep_system_the_system_message_is_summarized_too(project: Any) -> None:
    provider = scripted({"text": "Brief trip plan."})
    session = conversation(project)

    compressed = Compressor(provider, keep_system=False, instruction="Shorten.", name="shrinker")(
        session
    )

    assert provider.requests[0][0] == {"role": "system", "content": "Shorten."}
    assert provider.requests[0][1]["content"].startswith("system: Be brief.\nuser: Plan a trip")
    assert [(c.kind, c.agent) for c in compressed.chunks] == [("summary", "shrinker")]


def test_an_empty_summary_stores_nothing(project: Any) -> None:
    session = conversation(project)
    before = SessionRow.objects.count()

    with pytest.raises(EmptySummary) as caught:
        Compressor(scripted({"text": "  "}))(session)

    assert str(caught.value) == (
        "compressor 'compressor': the model (scripted/scripted-1) returned no summary text "
        f"for session {session.id}; nothing was stored"
    )
    assert SessionRow.objects.count() == before


def branches(project: Any) -> tuple[Session, Session]:
    root = Session.from_user_message("Compare A and B.", project=project)
    up, down = root.fork(), root.fork()
    up.append("A is fast.", role="assistant", agent="a-fan")
    down.append("B is safe.", role="assistant", agent="b-fan")
    return up, down


def test_a_summary_merge_uses_the_compressor_as_summarizer(project: Any) -> None:
    provider = scripted({"text": "A is fast, B is safe.", "usage": _u(40, 8)})
    up, down = branches(project)
    compressor = Compressor(provider, name="merger")

    merged = Session.merge(up, down, strategy="summary", summarizer=compressor.summarizer)

    assert provider.requests == [
        [
            {"role": "system", "content": DEFAULT_MERGE_INSTRUCTION},
            {
                "role": "user",
                "content": f"## Branch 1 (session {up.id})\nassistant: A is fast.\n\n"
                f"## Branch 2 (session {down.id})\nassistant: B is safe.",
            },
        ]
    ]
    assert [(c.role, c.kind, c.content, c.agent, c.usage) for c in merged.chunks] == [
        ("user", "message", {"text": "Compare A and B."}, "", None),
        (
            "assistant",
            "summary",
            {"text": "A is fast, B is safe.", "branches": [str(up.id), str(down.id)]},
            "merger",
            spent(40, 8),
        ),
    ]
    assert merged.op == "merge"
    assert merged.usage["total_tokens"] == 48


# --- the API's default summarizer -----------------------------------------------------------


def test_default_summarizer_is_none_without_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENRATH_SUMMARY_PROVIDER", raising=False)
    assert default_summarizer() is None


def test_a_configured_summary_provider_serves_api_summary_merges(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make_token: Any, client_for: Any, project: Any
) -> None:
    fixture = tmp_path / "summary.json"
    fixture.write_text(json.dumps([{"text": "Both are fine.", "usage": _u(12, 3)}]))
    monkeypatch.setenv("OPENRATH_SUMMARY_PROVIDER", f"scripted:{fixture}")
    up, down = branches(project)
    client = client_for(make_token(["sessions:write"]))

    response = client.post(
        "/api/v1/sessions/merge/",
        {"sessions": [str(up.id), str(down.id)], "strategy": "summary"},
        format="json",
    )

    assert response.status_code == 201
    merged = Session.load(response.json()["id"])
    assert [(c.kind, c.content, c.agent) for c in merged.chunks][1:] == [
        (
            "summary",
            {"text": "Both are fine.", "branches": [str(up.id), str(down.id)]},
            "compressor",
        )
    ]
    assert merged.usage["total_tokens"] == 15


def test_a_summary_provider_spec_without_a_fixture_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENRATH_SUMMARY_PROVIDER", "scripted")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "OPENRATH_SUMMARY_PROVIDER='scripted': the scripted provider needs a fixture: "
            "'scripted:<path>'"
        )
        + "$",
    ):
        default_summarizer()


def test_services_merge_with_the_default_summarizer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, project: Any
) -> None:
    fixture = tmp_path / "summary.json"
    fixture.write_text(json.dumps([{"text": "Merged."}]))
    monkeypatch.setenv("OPENRATH_SUMMARY_PROVIDER", f"scripted:{fixture}")
    up, down = branches(project)
    summarizer = default_summarizer()
    assert summarizer is not None

    merged = services.session_merge(
        sessions=[up.row, down.row], strategy="summary", summarizer=summarizer
    )

    assert merged.metadata == {"strategy": "summary", "common_prefix": 1}
