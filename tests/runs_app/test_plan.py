"""The plan compiler: ported OpenRath workflows, validation, hashing, graph, fan-out (no DB)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest

from runs_app.authoring import EffectClass, RetryPolicy, router, step
from runs_app.plan import (
    FanOut,
    Plan,
    PlanError,
    PlanNode,
    Route,
    RouteError,
    UnknownNode,
    _code_fingerprint,
    bind_handlers,
    call_handler,
    compile_workflow,
    declared_nodes,
    source_hash,
)
from sessions_app.workflow import Workflow
from tests.runs_app import TempModules
from tests.runs_app.workflows import fanout, openrath_style
from tests.support import REPO


def sha256_of_source(function) -> str:
    material = textwrap.dedent(inspect.getsource(function)).strip()
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def summary(plan: Plan) -> list[tuple]:
    return [
        (
            node.id,
            node.kind,
            node.successors,
            node.effects,
            node.retry,
            node.idempotency_key,
            node.timeout_seconds,
            node.checkpoint,
            node.join,
            node.is_async,
            node.takes_ctx,
        )
        for node in plan.nodes
    ]


def row(
    id,
    kind,
    successors,
    effects,
    *,
    retry=None,
    key=None,
    timeout=None,
    checkpoint=True,
    join=False,
    is_async=False,
    takes_ctx=None,
):
    """The expected ``summary`` tuple of one node; steps take ctx, routers (OpenRath) do not."""
    return (
        id,
        kind,
        successors,
        effects,
        retry or RetryPolicy(),
        key,
        timeout,
        checkpoint,
        join,
        is_async,
        kind == "step" if takes_ctx is None else takes_ctx,
    )


@pytest.fixture
def temp_modules(tmp_path):
    modules = TempModules(tmp_path / "modules")
    yield modules
    modules.close()


# -- the ported OpenRath workflows ------------------------------------------------------------

NONE, READ, IDEM, NONIDEM = (
    EffectClass.NONE,
    EffectClass.READ_ONLY,
    EffectClass.IDEMPOTENT,
    EffectClass.NON_IDEMPOTENT,
)


def test_order_pipeline_plan():
    plan = compile_workflow(openrath_style.OrderPipeline)
    assert plan.name == "tests.runs_app.workflows.openrath_style.OrderPipeline"
    assert plan.version == "3"
    assert plan.entry == "validate"
    assert plan.description == ""  # the class sets it in __init__ (OpenRath style)
    assert plan.fanouts == ()
    price_retry = RetryPolicy(max_attempts=3, base_seconds=0.01, max_seconds=0.05)
    assert summary(plan) == [
        row("manual_review", "step", (), READ, checkpoint=False),
        row("price", "step", ("route",), IDEM, retry=price_retry),
        row("route", "router", ("ship", "manual_review"), NONE),
        row("ship", "step", (), NONIDEM),
        row("validate", "step", ("price",), NONE),
    ]
    cls = openrath_style.OrderPipeline
    assert {node.id: node.source_hash for node in plan.nodes} == {
        name: sha256_of_source(getattr(cls, name))
        for name in ("manual_review", "price", "route", "ship", "validate")
    }


def test_refund_workflow_plan():
    plan = compile_workflow(openrath_style.RefundWorkflow())
    assert plan.name == "tests.runs_app.workflows.openrath_style.RefundWorkflow"
    assert plan.version == "1"
    assert plan.entry == "lookup"
    assert plan.description == "Refund with manager approval"  # read from the instance
    pay_retry = RetryPolicy(max_attempts=2)
    assert summary(plan) == [
        row("approve", "step", ("decide",), NONE),
        row("decide", "router", ("pay", "notify_rejected"), NONE),
        row("lookup", "step", ("approve",), READ, timeout=5.0, is_async=True),
        row("notify_rejected", "step", (), IDEM),
        row("pay", "step", (), NONIDEM, retry=pay_retry, key="refund-payment"),
    ]


def test_loop_plan_allows_cycles():
    plan = compile_workflow(openrath_style.CountToThree)
    assert plan.entry == "count"
    assert summary(plan) == [
        row("check", "router", ("count", "done"), NONE),
        row("count", "step", ("check",), NONIDEM),
        row("done", "step", (), NONIDEM),
    ]


def test_to_dict_and_canonical_json_are_exact():
    cls = openrath_style.CountToThree
    plan = compile_workflow(cls)
    once = {"max_attempts": 1, "base_seconds": 0.25, "max_seconds": 30.0}

    def node(id, kind, successors, effects, takes_ctx):
        return {
            "id": id,
            "kind": kind,
            "successors": successors,
            "retry": once,
            "effects": effects,
            "idempotency_key": None,
            "timeout_seconds": None,
            "checkpoint": True,
            "join": False,
            "is_async": False,
            "takes_ctx": takes_ctx,
            "source_hash": sha256_of_source(getattr(cls, id)),
        }

    expected = {
        "format": 1,
        "name": "tests.runs_app.workflows.openrath_style.CountToThree",
        "version": "1",
        "entry": "count",
        "nodes": [
            node("check", "router", ["count", "done"], "none", False),
            node("count", "step", ["check"], "non_idempotent", True),
            node("done", "step", [], "non_idempotent", True),
        ],
    }
    assert plan.to_dict() == expected
    canonical = json.dumps(expected, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert plan.canonical_json() == canonical
    assert plan.hash == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert len(plan.hash) == 64


def test_plan_is_immutable():
    plan = compile_workflow(openrath_style.CountToThree)
    assert isinstance(plan.nodes, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.entry = "done"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.nodes[0].successors = ()  # type: ignore[misc]


def test_compiling_runs_no_workflow_code():
    openrath_style.FLAKY_CALLS["n"] = 0
    compile_workflow(openrath_style.OrderPipeline)
    assert openrath_style.FLAKY_CALLS["n"] == 0


# -- hash identity ----------------------------------------------------------------------------

ALL_EXAMPLES = (
    openrath_style.OrderPipeline,
    openrath_style.RefundWorkflow,
    openrath_style.CountToThree,
    fanout.ResearchFanOut,
)


def test_hash_is_stable_within_a_process():
    for cls in ALL_EXAMPLES:
        first, second = compile_workflow(cls), compile_workflow(cls)
        assert first == second
        assert first.hash == second.hash
        assert first.canonical_json() == second.canonical_json()


@pytest.mark.parametrize("seed", ["0", "1", "12345"])
def test_hash_is_stable_across_processes(seed):
    script = (
        "from runs_app.plan import compile_workflow\n"
        "from tests.runs_app.workflows import fanout, openrath_style as o\n"
        "for cls in (o.OrderPipeline, o.RefundWorkflow, o.CountToThree, fanout.ResearchFanOut):\n"
        "    print(compile_workflow(cls).hash)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == [compile_workflow(cls).hash for cls in ALL_EXAMPLES]


class Counter(Workflow):
    name = "counter"
    description = "counts"

    @step(entry=True)
    def count(self, state, ctx):
        return state


class CounterReworded(Counter):
    description = "counts, described differently"


class CounterV2(Counter):
    workflow_version = "2"


def test_description_is_not_part_of_the_identity_but_version_is():
    base = compile_workflow(Counter)
    reworded = compile_workflow(CounterReworded)
    assert reworded.description == "counts, described differently"
    assert reworded.hash == base.hash
    assert reworded == base  # description is compare=False
    bumped = compile_workflow(CounterV2)
    assert bumped.version == "2"
    assert bumped.hash != base.hash


class DeclaredFirst(Workflow):
    name = "declaration-order"

    @step(entry=True, successors=("second",))
    def first(self, state, ctx):
        return state

    @step()
    def second(self, state, ctx):
        return state


class DeclaredSecond(Workflow):
    name = "declaration-order"

    @step()
    def second(self, state, ctx):
        return state

    @step(entry=True, successors=("second",))
    def first(self, state, ctx):
        return state


def test_hash_does_not_depend_on_declaration_order():
    assert compile_workflow(DeclaredFirst).hash == compile_workflow(DeclaredSecond).hash


DEMO = """\
from runs_app.authoring import RetryPolicy, router, step
from sessions_app.workflow import Workflow

LIMIT = 3


class Demo(Workflow):
    name = "demo"

    @step(entry=True, successors=("check",))
    def count(self, state, ctx):
        return {**state, "n": state.get("n", 0) + 1}

    @router(successors=("count", "done"))
    def check(self, state):
        return "count" if state["n"] < 3 else "done"

    @step()
    def done(self, state, ctx):
        return state
"""


def _compile_demo(root, source):
    modules = TempModules(root)
    try:
        modules.write("plan_hash_demo", source)
        return compile_workflow(modules.load("plan_hash_demo").Demo)
    finally:
        modules.close()


@pytest.mark.parametrize(
    ("old", "new", "changed_node"),
    [
        ('state["n"] < 3', 'state["n"] < 4', "check"),
        ("    @step()\n    def done", "    @step(effects='idempotent')\n    def done", "done"),
        ('(successors=("count", "done"))', '(successors=("done", "count"))', "check"),
        ("        return state\n", "        return state  # same behaviour, new text\n", "done"),
    ],
)
def test_hash_changes_when_a_handler_source_changes(tmp_path, old, new, changed_node):
    assert old in DEMO
    before = _compile_demo(tmp_path / "v1", DEMO)
    after = _compile_demo(tmp_path / "v2", DEMO.replace(old, new))
    assert before.name == after.name == "demo"
    assert after.hash != before.hash
    changed = [
        node.id for node, other in zip(before.nodes, after.nodes, strict=True) if node != other
    ]
    assert changed == [changed_node]
    assert before.node(changed_node).source_hash != after.node(changed_node).source_hash


def test_hash_ignores_code_outside_the_handlers(tmp_path):
    before = _compile_demo(tmp_path / "v1", DEMO)
    after = _compile_demo(
        tmp_path / "v2", DEMO.replace("LIMIT = 3\n", "LIMIT = 4  # module code, not a handler\n")
    )
    assert after.hash == before.hash


GENERATED = """\
from runs_app.authoring import step
from sessions_app.workflow import Workflow


class Generated(Workflow):
    name = "generated"

    @step(entry=True)
    def only(self, state, ctx):
        kinds = [k for k in state if k in {"alpha", "beta", "gamma", "delta", "epsilon"}]
        scale = lambda x: x * 2.5
        return {**state, "kinds": kinds, "scaled": scale(1), "raw": b"\\x00", "t": (1, None)}
"""

GENERATED_HASH_SCRIPT = """\
import sys
from runs_app.plan import compile_workflow
namespace = {"__name__": "generated_flows"}
exec(compile(sys.stdin.read(), "<generated>", "exec"), namespace)
print(compile_workflow(namespace["Generated"]).hash)
"""


def _compile_generated(source):
    namespace = {"__name__": "generated_flows"}
    exec(compile(source, "<generated>", "exec"), namespace)  # noqa: S102 - no source on purpose
    return namespace["Generated"]


def test_handlers_without_source_hash_their_code_stably():
    cls = _compile_generated(GENERATED)
    with pytest.raises(OSError, match=r"^could not get source code$"):
        inspect.getsource(cls.only)
    fingerprint = json.dumps(_code_fingerprint(cls.only.__code__), sort_keys=True)
    assert "0x" not in fingerprint
    assert "<code object" not in fingerprint
    plan = compile_workflow(cls)
    hashes = set()
    for seed in ("0", "1", "2", "3"):
        result = subprocess.run(
            [sys.executable, "-c", GENERATED_HASH_SCRIPT],
            input=GENERATED,
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        hashes.add(result.stdout.strip())
    assert hashes == {plan.hash}
    edited = compile_workflow(_compile_generated(GENERATED.replace('"epsilon"', '"zeta"')))
    assert edited.hash != plan.hash


def test_source_hash_is_sha256_of_the_dedented_source():
    handler = openrath_style.OrderPipeline.route
    assert source_hash(handler) == sha256_of_source(handler)
    assert inspect.getsource(handler).lstrip().startswith("@router(")  # decorators included


# -- static validation ------------------------------------------------------------------------


class Empty(Workflow):
    def forward(self, session):
        return session


class NoEntry(Workflow):
    @step()
    def a(self, state, ctx):
        return state


class TwoEntries(Workflow):
    @step(entry=True)
    def a(self, state, ctx):
        return state

    @step(entry=True)
    def b(self, state, ctx):
        return state


class UnknownSuccessor(Workflow):
    @step(entry=True, successors=("missing",))
    def a(self, state, ctx):
        return state


class MultiSuccessorStep(Workflow):
    @step(entry=True, successors=("b", "c"))
    def a(self, state, ctx):
        return state

    @step()
    def b(self, state, ctx):
        return state

    @step()
    def c(self, state, ctx):
        return state


class Unreachable(Workflow):
    @step(entry=True)
    def a(self, state, ctx):
        return state

    @step()
    def orphan(self, state, ctx):
        return state

    @step(successors=("orphan",))
    def another(self, state, ctx):
        return state


class StepWithoutCtx(Workflow):
    @step(entry=True)
    def a(self, state):
        return state


class RouterWithoutState(Workflow):
    @step(entry=True, successors=("r",))
    def a(self, state, ctx):
        return state

    @router(successors=("a",))
    def r(self):
        return "a"


class KeywordOnlyHandler(Workflow):
    @step(entry=True)
    def a(self, state, ctx, *, extra):
        return state


class BadName(Workflow):
    name = ""

    @step(entry=True)
    def a(self, state, ctx):
        return state


def _foreign_handler(self, state, ctx):
    return state


_foreign_handler.__openrath_node_spec__ = object()  # e.g. decorated by rath's own @step


class ForeignDecorator(Workflow):
    a = _foreign_handler


PREFIX = "tests.runs_app.test_plan"


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (Empty, f"workflow {PREFIX}.Empty has no @step methods"),
        (NoEntry, "workflow must declare exactly one entrypoint; found 0"),
        (TwoEntries, "workflow must declare exactly one entrypoint; found 2"),
        (UnknownSuccessor, "node 'a' references unknown successor 'missing'"),
        (MultiSuccessorStep, "step 'a' has multiple successors; use @router"),
        (Unreachable, "unreachable workflow nodes: ['another', 'orphan']"),
        (StepWithoutCtx, "step 'a' must be defined as def a(self, state, ctx)"),
        (
            RouterWithoutState,
            "router 'r' must be defined as def r(self, state) or def r(self, state, ctx)",
        ),
        (KeywordOnlyHandler, "step 'a' must be defined as def a(self, state, ctx)"),
        (BadName, f"{PREFIX}.BadName.name must be a non-empty string, got ''"),
        (
            ForeignDecorator,
            "node 'a': _foreign_handler carries node metadata from another package (builtins); "
            "import step and router from openrath_project.flow",
        ),
    ],
)
def test_validation_errors(cls, message):
    with pytest.raises(PlanError) as excinfo:
        compile_workflow(cls)
    assert str(excinfo.value) == message
    assert isinstance(excinfo.value, ValueError)


def test_unreachable_uses_openrath_message():
    class Orphaned(Workflow):
        @step(entry=True)
        def a(self, state, ctx):
            return state

        @step()
        def orphan(self, state, ctx):
            return state

    with pytest.raises(PlanError) as excinfo:
        compile_workflow(Orphaned)
    assert str(excinfo.value) == "unreachable workflow nodes: ['orphan']"


def test_static_and_class_methods_are_refused():
    class Static(Workflow):
        @staticmethod
        @step(entry=True)
        def a(state, ctx):
            return state

    class Classy(Workflow):
        @classmethod
        @step(entry=True)
        def a(cls, state, ctx):
            return state

    for cls, kind in ((Static, "staticmethod"), (Classy, "classmethod")):
        with pytest.raises(PlanError) as excinfo:
            compile_workflow(cls)
        assert str(excinfo.value) == (
            f"node 'a' must be a plain method, not a {kind}: def a(self, state, ctx)"
        )


def test_router_signatures_decide_takes_ctx():
    class Signatures(Workflow):
        @step(entry=True, successors=("two",))
        def start(self, state, ctx):
            return state

        @router(successors=("three",))
        def two(self, state):
            return "three"

        @router(successors=("optional",))
        def three(self, state, ctx):
            return "optional"

        @router(successors=("star",))
        def optional(self, state, ctx=None):
            return "star"

        @router(successors=("end",))
        def star(self, *args):
            return "end"

        @step()
        async def end(self, state, ctx, extra=None):
            return state

    plan = compile_workflow(Signatures)
    assert [(node.id, node.takes_ctx, node.is_async) for node in plan.nodes] == [
        ("end", True, True),
        ("optional", True, False),
        ("star", True, False),
        ("start", True, False),
        ("three", True, False),
        ("two", False, False),
    ]


def test_inherited_nodes_and_overrides():
    class Loop(openrath_style.CountToThree):
        name = "loop"

    plan = compile_workflow(Loop)
    base = compile_workflow(openrath_style.CountToThree)
    assert plan.name == "loop"
    assert plan.nodes == base.nodes
    assert plan.hash != base.hash

    class Overridden(openrath_style.CountToThree):
        def done(self, state, ctx):  # no longer a node
            return state

    with pytest.raises(PlanError) as excinfo:
        compile_workflow(Overridden)
    assert str(excinfo.value) == "node 'check' references unknown successor 'done'"

    class Redecorated(openrath_style.CountToThree):
        @step(effects="idempotent")
        def done(self, state, ctx):
            return state

    redone = compile_workflow(Redecorated).node("done")
    assert redone.effects is EffectClass.IDEMPOTENT
    assert redone.source_hash == sha256_of_source(Redecorated.done)
    assert [name for name, _function, _meta in declared_nodes(Redecorated())] == [
        "check",
        "count",
        "done",
    ]


# -- graph ------------------------------------------------------------------------------------


def test_graph_of_the_order_pipeline():
    plan = compile_workflow(openrath_style.OrderPipeline())
    graph = plan.graph()
    assert graph["name"] == "tests.runs_app.workflows.openrath_style.OrderPipeline"
    assert graph["version"] == "3"
    assert graph["description"] == "validate -> price -> route -> (ship | manual_review)"
    assert graph["hash"] == plan.hash
    assert graph["entry"] == "validate"
    assert graph["edges"] == [
        {"source": "price", "target": "route", "branch": False},
        {"source": "route", "target": "ship", "branch": False},
        {"source": "route", "target": "manual_review", "branch": False},
        {"source": "validate", "target": "price", "branch": False},
    ]
    once = {"max_attempts": 1, "base_seconds": 0.25, "max_seconds": 30.0}
    assert graph["nodes"][2] == {
        "id": "route",
        "kind": "router",
        "entry": False,
        "successors": ["ship", "manual_review"],
        "join": False,
        "fanout": None,
        "effects": "none",
        "retry": once,
        "idempotency_key": None,
        "timeout_seconds": None,
        "checkpoint": True,
        "is_async": False,
    }
    assert graph["nodes"][1] == {
        "id": "price",
        "kind": "step",
        "entry": False,
        "successors": ["route"],
        "join": False,
        "fanout": None,
        "effects": "idempotent",
        "retry": {"max_attempts": 3, "base_seconds": 0.01, "max_seconds": 0.05},
        "idempotency_key": None,
        "timeout_seconds": None,
        "checkpoint": True,
        "is_async": False,
    }
    assert [(node["id"], node["entry"]) for node in graph["nodes"]] == [
        ("manual_review", False),
        ("price", False),
        ("route", False),
        ("ship", False),
        ("validate", True),
    ]
    assert json.loads(json.dumps(graph)) == graph  # JSON-able as is


def test_graph_marks_fan_out_branches():
    graph = compile_workflow(fanout.ResearchFanOut).graph()
    dispatch = next(node for node in graph["nodes"] if node["id"] == "dispatch")
    assert dispatch["fanout"] == {"join": "merge", "branches": ["optimist", "skeptic"]}
    merge = next(node for node in graph["nodes"] if node["id"] == "merge")
    assert merge["join"] is True
    assert [(edge["source"], edge["target"]) for edge in graph["edges"] if edge["branch"]] == [
        ("dispatch", "optimist"),
        ("dispatch", "skeptic"),
    ]
    assert len(graph["edges"]) == 10


# -- lookups, from_dict -----------------------------------------------------------------------


def test_node_lookup():
    plan = compile_workflow(openrath_style.OrderPipeline)
    assert plan.node("route").kind == "router"
    with pytest.raises(UnknownNode) as excinfo:
        plan.node("nope")
    assert str(excinfo.value) == (
        "plan 'tests.runs_app.workflows.openrath_style.OrderPipeline' has no node 'nope'"
    )


def test_from_dict_round_trips():
    for cls in ALL_EXAMPLES:
        plan = compile_workflow(cls)
        stored = json.loads(plan.canonical_json())
        rebuilt = Plan.from_dict(stored, description="restored")
        assert rebuilt == plan
        assert rebuilt.hash == plan.hash
        assert rebuilt.fanouts == plan.fanouts
        assert rebuilt.description == "restored"


def test_from_dict_revalidates():
    stored = compile_workflow(openrath_style.CountToThree).to_dict()
    stored["nodes"][0]["successors"] = ["count", "gone"]
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict(stored)
    assert str(excinfo.value) == "node 'check' references unknown successor 'gone'"

    stored = compile_workflow(openrath_style.CountToThree).to_dict()
    assert "format" in stored
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict({**stored, "format": 2})
    assert str(excinfo.value) == "unsupported plan format 2; expected 1"
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict({key: value for key, value in stored.items() if key != "entry"})
    assert str(excinfo.value) == "stored plan is missing 'entry'"
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict({**stored, "nodes": []})
    assert str(excinfo.value) == "stored plan must have a non-empty list of nodes"
    bad_hash = {**stored["nodes"][0], "source_hash": "xyz"}
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict({**stored, "nodes": [bad_hash, *stored["nodes"][1:]]})
    assert str(excinfo.value) == "node 'check' source_hash must be a SHA-256 hex digest"
    bad_kind = {**stored["nodes"][0], "kind": "opaque"}
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict({**stored, "nodes": [bad_kind, *stored["nodes"][1:]]})
    assert str(excinfo.value) == "node kind must be 'step' or 'router', got 'opaque'"
    no_retry = {key: value for key, value in stored["nodes"][0].items() if key != "retry"}
    with pytest.raises(PlanError, match=r"^malformed plan node \{.*\}: 'retry'$"):
        Plan.from_dict({**stored, "nodes": [no_retry, *stored["nodes"][1:]]})


def test_plan_constructor_validates_what_the_compiler_cannot_produce():
    node = compile_workflow(openrath_style.CountToThree).node("count")
    with pytest.raises(PlanError) as excinfo:
        Plan(name="x", version="1", description="", entry="count", nodes=(node, node))
    assert str(excinfo.value) == "workflow node ids must be unique; repeated: 'count'"
    with pytest.raises(PlanError) as excinfo:
        Plan(name="x", version="1", description="", entry="elsewhere", nodes=(node,))
    assert str(excinfo.value) == "entry 'elsewhere' is not a node of the workflow"
    with pytest.raises(PlanError) as excinfo:
        Plan(name="x", version="1", description="", entry="count", nodes=())
    assert str(excinfo.value) == "a plan needs at least one node"
    lonely_router = dataclasses.replace(node, kind="router", successors=())
    with pytest.raises(PlanError) as excinfo:
        Plan(name="x", version="1", description="", entry="count", nodes=(lonely_router,))
    assert str(excinfo.value) == "router 'count' requires successors"
    joining_router = dataclasses.replace(node, kind="router", successors=("count",), join=True)
    with pytest.raises(PlanError) as excinfo:
        Plan(name="x", version="1", description="", entry="count", nodes=(joining_router,))
    assert str(excinfo.value) == "router 'count' cannot be a join step"


# -- fan-out and join -------------------------------------------------------------------------


class DifferentJoins(Workflow):
    @router(entry=True, successors=("a", "b"))
    def fan(self, state, ctx):
        return ["a", "b"]

    @step(successors=("left",))
    def a(self, state, ctx):
        return state

    @step(successors=("right",))
    def b(self, state, ctx):
        return state

    @step(join=True)
    def left(self, state, ctx):
        return state

    @step(join=True)
    def right(self, state, ctx):
        return state


class LinearJoin(Workflow):
    @step(entry=True, successors=("together",))
    def a(self, state, ctx):
        return state

    @step(join=True)
    def together(self, state, ctx):
        return state


class JoinOnlyBehindRouter(Workflow):
    @router(entry=True, successors=("a", "b"))
    def fan(self, state, ctx):
        return "a"

    @step(successors=("inner",))
    def a(self, state, ctx):
        return state

    @step(successors=("inner",))
    def b(self, state, ctx):
        return state

    @router(successors=("together", "a"))
    def inner(self, state):
        return "together"

    @step(join=True)
    def together(self, state, ctx):
        return state


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (DifferentJoins, "router 'fan' successors lead to different join steps: ['left', 'right']"),
        (
            LinearJoin,
            "join step 'together' is not where any router's branches meet: no router successor "
            "leads to it through steps only",
        ),
        (
            JoinOnlyBehindRouter,
            "join step 'together' is not where any router's branches meet: no router successor "
            "leads to it through steps only",
        ),
    ],
)
def test_fan_out_validation_errors(cls, message):
    with pytest.raises(PlanError) as excinfo:
        compile_workflow(cls)
    assert str(excinfo.value) == message


class Shapes(Workflow):
    """Every kind of router successor: branches, the join itself, a terminal, a router, a loop."""

    @router(entry=True, successors=("a", "b", "merge", "stop", "detour", "spin"))
    def fan(self, state, ctx):
        return ["a", "b"]

    @step(successors=("a2",))
    def a(self, state, ctx):
        return state

    @step(successors=("merge",))
    def a2(self, state, ctx):
        return state

    @step(successors=("merge",))
    def b(self, state, ctx):
        return state

    @step(join=True, successors=("again",))
    def merge(self, state, ctx):
        return state

    @router(successors=("fan", "stop"))
    def again(self, state):
        return "stop"

    @step()
    def stop(self, state, ctx):
        return state

    @step(successors=("again",))
    def detour(self, state, ctx):
        return state

    @step(successors=("spin2",))
    def spin(self, state, ctx):
        return state

    @step(successors=("spin",))
    def spin2(self, state, ctx):
        return state


def test_fanouts_are_derived_statically():
    plan = compile_workflow(Shapes)
    assert plan.fanouts == (FanOut(router="fan", join="merge", branches=("a", "b")),)
    assert plan.fanout("fan") == FanOut(router="fan", join="merge", branches=("a", "b"))
    assert plan.fanout("again") is None  # its successors reach no join through steps only
    assert compile_workflow(fanout.ResearchFanOut).fanouts == (
        FanOut(router="dispatch", join="merge", branches=("optimist", "skeptic")),
    )


@pytest.mark.parametrize(
    ("router_id", "result", "route"),
    [
        ("fan", "stop", Route(targets=("stop",))),
        ("fan", "a", Route(targets=("a",))),  # a plain transition, even to a branch
        ("fan", "merge", Route(targets=("merge",))),  # straight to the join: a plain step
        ("fan", ["a", "b"], Route(targets=("a", "b"), join="merge")),
        ("fan", ("b", "a"), Route(targets=("b", "a"), join="merge")),  # the listed order
        ("fan", ["b"], Route(targets=("b",), join="merge")),
        ("again", "fan", Route(targets=("fan",))),
    ],
)
def test_resolve_route(router_id, result, route):
    plan = compile_workflow(Shapes)
    assert plan.resolve_route(router_id, result) == route
    assert route.fans_out is (route.join is not None)


INVALID = "router 'fan' returned invalid successor"


@pytest.mark.parametrize(
    ("router_id", "result", "message"),
    [
        ("fan", "nowhere", f"{INVALID} 'nowhere'"),
        ("fan", None, f"{INVALID} None"),
        ("fan", {"a": 1}, f"{INVALID} {{'a': 1}}"),
        ("fan", [], f"{INVALID} []: a fan-out names at least one successor"),
        ("fan", ["a", 1], f"{INVALID} ['a', 1]: successor names must be strings"),
        (
            "fan",
            ["a", "x"],
            f"{INVALID} ['a', 'x']: 'x' is not one of its successors "
            "['a', 'b', 'merge', 'stop', 'detour', 'spin']",
        ),
        ("fan", ["a", "b", "a"], f"{INVALID} ['a', 'b', 'a']: 'a' is listed twice"),
        (
            "fan",
            ["a", "merge"],
            f"{INVALID} ['a', 'merge']: 'merge' is not a branch meeting at join step 'merge' "
            "('merge' is the join step itself)",
        ),
        (
            "fan",
            ["a", "stop"],
            f"{INVALID} ['a', 'stop']: 'stop' is not a branch meeting at join step 'merge' "
            "(its chain ends at step 'stop')",
        ),
        (
            "fan",
            ["detour", "b"],
            f"{INVALID} ['detour', 'b']: 'detour' is not a branch meeting at join step 'merge' "
            "(its chain reaches router 'again')",
        ),
        (
            "fan",
            ["a", "spin"],
            f"{INVALID} ['a', 'spin']: 'spin' is not a branch meeting at join step 'merge' "
            "(its chain loops back at step 'spin')",
        ),
        (
            "again",
            ["fan", "stop"],
            "router 'again' returned invalid successor ['fan', 'stop']: router 'again' cannot "
            "fan out, none of its successors leads through steps to a join=True step",
        ),
        ("merge", "again", "node 'merge' is a step, not a router"),
    ],
)
def test_resolve_route_refusals(router_id, result, message):
    plan = compile_workflow(Shapes)
    with pytest.raises(RouteError) as excinfo:
        plan.resolve_route(router_id, result)
    assert str(excinfo.value) == message


def test_openrath_router_returning_a_list_is_refused_with_its_message():
    plan = compile_workflow(openrath_style.OrderPipeline)
    with pytest.raises(RouteError) as excinfo:
        plan.resolve_route("route", ["ship", "manual_review"])
    assert str(excinfo.value) == (
        "router 'route' returned invalid successor ['ship', 'manual_review']: router 'route' "
        "cannot fan out, none of its successors leads through steps to a join=True step"
    )
    with pytest.raises(UnknownNode):
        plan.resolve_route("nope", "ship")


# -- binding and calling handlers -------------------------------------------------------------


class Ctx:
    run_id = "run-1"


def test_bind_and_call_handlers():
    plan = compile_workflow(openrath_style.OrderPipeline)
    workflow = openrath_style.OrderPipeline()
    handlers = bind_handlers(plan, workflow)
    assert list(handlers) == ["manual_review", "price", "route", "ship", "validate"]
    assert handlers["ship"] == workflow.ship
    state = {"items": [{"qty": 2, "unit": 10}], "total": 20}
    assert call_handler(plan.node("route"), handlers["route"], state, Ctx()) == "ship"
    assert call_handler(plan.node("ship"), handlers["ship"], state, Ctx()) == {
        **state,
        "status": "shipped",
        "run_id": "run-1",
    }


def test_call_async_handler_returns_a_coroutine():
    plan = compile_workflow(openrath_style.RefundWorkflow)
    handlers = bind_handlers(plan, openrath_style.RefundWorkflow())
    coroutine = call_handler(plan.node("lookup"), handlers["lookup"], {"amount": 42}, Ctx())
    assert inspect.iscoroutine(coroutine)
    assert asyncio.run(coroutine) == {"amount": 42, "customer_tier": "gold"}


def test_bind_handlers_checks_the_instance():
    plan = compile_workflow(openrath_style.OrderPipeline)
    with pytest.raises(PlanError) as excinfo:
        bind_handlers(plan, openrath_style.CountToThree())
    assert str(excinfo.value) == (
        "workflow tests.runs_app.workflows.openrath_style.CountToThree cannot run plan "
        "tests.runs_app.workflows.openrath_style.OrderPipeline"
    )
    with pytest.raises(TypeError) as excinfo:
        bind_handlers(plan, openrath_style.OrderPipeline)
    assert str(excinfo.value) == "bind_handlers needs a workflow instance, not a class"

    class Counting(Workflow):
        name = "counting"

        @step(entry=True)
        def count(self, state, ctx):
            return state

    counting = compile_workflow(Counting)

    class Renamed(Workflow):  # same name, node missing
        name = "counting"

        @step(entry=True)
        def tally(self, state, ctx):
            return state

    with pytest.raises(PlanError) as excinfo:
        bind_handlers(counting, Renamed())
    assert str(excinfo.value) == "workflow counting has no @step method 'count' for its plan"


def test_plan_node_fields_are_the_documented_ones():
    assert [field.name for field in dataclasses.fields(PlanNode)] == [
        "id",
        "kind",
        "successors",
        "retry",
        "effects",
        "idempotency_key",
        "timeout_seconds",
        "checkpoint",
        "join",
        "is_async",
        "takes_ctx",
        "source_hash",
    ]
