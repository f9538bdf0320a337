"""Authoring API: decorators, RetryPolicy, EffectClass, the Workflow base class (no database)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from runs_app.authoring import (
    NODE_SPEC_ATTR,
    EffectClass,
    NodeMeta,
    RetryPolicy,
    node_meta,
    router,
    step,
)
from sessions_app.workflow import Workflow, workflow_name
from tests.runs_app.workflows import openrath_style

# -- EffectClass ------------------------------------------------------------------------------


def test_effect_class_values_match_openrath():
    assert [(member.name, member.value) for member in EffectClass] == [
        ("NONE", "none"),
        ("READ_ONLY", "read_only"),
        ("IDEMPOTENT", "idempotent"),
        ("NON_IDEMPOTENT", "non_idempotent"),
    ]
    assert isinstance(EffectClass.NONE, str)
    assert EffectClass.READ_ONLY == "read_only"


def test_effect_class_coerce():
    assert EffectClass.coerce("idempotent") is EffectClass.IDEMPOTENT
    assert EffectClass.coerce(EffectClass.NONE) is EffectClass.NONE
    with pytest.raises(ValueError, match=r"^unknown effect class 'sometimes'; expected one of: "):
        EffectClass.coerce("sometimes")
    with pytest.raises(ValueError, match=r"^unknown effect class 'NONE'") as excinfo:
        EffectClass.coerce("NONE")
    assert str(excinfo.value) == (
        "unknown effect class 'NONE'; expected one of: none, read_only, idempotent, non_idempotent"
    )


# -- RetryPolicy ------------------------------------------------------------------------------


def test_retry_policy_defaults_and_to_dict():
    policy = RetryPolicy()
    assert policy == RetryPolicy(max_attempts=1, base_seconds=0.25, max_seconds=30.0)
    assert policy.to_dict() == {"max_attempts": 1, "base_seconds": 0.25, "max_seconds": 30.0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_attempts = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"max_attempts": -3}, "max_attempts must be at least 1"),
        ({"base_seconds": 0}, "base_seconds must be greater than zero"),
        ({"base_seconds": -1.5}, "base_seconds must be greater than zero"),
        (
            {"base_seconds": 2, "max_seconds": 1},
            "max_seconds must be greater than or equal to base_seconds",
        ),
        ({"base_seconds": float("nan")}, "base_seconds must be finite"),
        ({"max_seconds": float("inf")}, "max_seconds must be finite"),
    ],
)
def test_retry_policy_checks(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 2.0}, "max_attempts must be an integer"),
        ({"max_attempts": True}, "max_attempts must be an integer"),
        ({"base_seconds": "1"}, "base_seconds must be a number"),
        ({"max_seconds": None}, "max_seconds must be a number"),
    ],
)
def test_retry_policy_types(kwargs, message):
    with pytest.raises(TypeError) as excinfo:
        RetryPolicy(**kwargs)
    assert str(excinfo.value) == message


def test_retry_policy_numbers_are_normalised_to_float():
    policy = RetryPolicy(max_attempts=3, base_seconds=1, max_seconds=4)
    assert policy == RetryPolicy(max_attempts=3, base_seconds=1.0, max_seconds=4.0)
    assert type(policy.base_seconds) is float
    assert type(policy.max_seconds) is float
    assert policy.to_dict() == {"max_attempts": 3, "base_seconds": 1.0, "max_seconds": 4.0}


def test_retry_policy_delay_is_capped_exponential_backoff():
    policy = RetryPolicy(max_attempts=10, base_seconds=0.5, max_seconds=3.0)
    assert [policy.delay(attempt) for attempt in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert RetryPolicy().delay(1) == 0.25
    assert RetryPolicy().delay(100_000) == 30.0
    with pytest.raises(ValueError, match=r"^attempt must be at least 1$"):
        policy.delay(0)


# -- @step and @router ------------------------------------------------------------------------


def test_step_defaults_match_openrath():
    @step()
    def handler(self, state, ctx):
        return state

    assert getattr(handler, NODE_SPEC_ATTR) == NodeMeta(
        kind="step",
        entry=False,
        successors=(),
        retry=RetryPolicy(),
        effects=EffectClass.NON_IDEMPOTENT,
        idempotency_key=None,
        timeout_seconds=None,
        checkpoint=True,
        join=False,
    )
    assert NODE_SPEC_ATTR == "__openrath_node_spec__"


def test_bare_step_equals_step_with_parentheses():
    @step
    def bare(self, state, ctx):
        return state

    @step()
    def called(self, state, ctx):
        return state

    assert node_meta(bare) == node_meta(called)
    assert bare(None, {"x": 1}, None) == {"x": 1}  # the function itself is returned


def test_step_records_every_argument():
    policy = RetryPolicy(max_attempts=4, base_seconds=0.1, max_seconds=1.0)

    @step(
        entry=True,
        successors=["next"],  # any iterable becomes a tuple
        retry=policy,
        effects="idempotent",
        idempotency_key="charge",
        timeout_seconds=5,
        checkpoint=False,
        join=True,
    )
    def handler(self, state, ctx):
        return state

    meta = node_meta(handler)
    assert meta == NodeMeta(
        kind="step",
        entry=True,
        successors=("next",),
        retry=policy,
        effects=EffectClass.IDEMPOTENT,
        idempotency_key="charge",
        timeout_seconds=5.0,
        checkpoint=False,
        join=True,
    )
    assert meta is not None
    assert type(meta.timeout_seconds) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.entry = False  # type: ignore[misc]


def test_router_metadata():
    @router(successors=("a", "b"), entry=True)
    def choose(self, state):
        return "a"

    assert node_meta(choose) == NodeMeta(
        kind="router",
        entry=True,
        successors=("a", "b"),
        retry=RetryPolicy(),
        effects=EffectClass.NONE,
        idempotency_key=None,
        timeout_seconds=None,
        checkpoint=True,
        join=False,
    )


def test_router_requires_successors():
    with pytest.raises(ValueError, match=r"^router successors must not be empty$"):
        router(successors=())


def test_bare_router_is_refused_with_a_hint():
    def choose(self, state):
        return "a"

    for attempt in (lambda: router(choose), lambda: router()):
        with pytest.raises(TypeError) as excinfo:
            attempt()
        assert str(excinfo.value) == (
            "@router needs its successors: use @router(successors=('a', 'b'))"
        )


def test_double_decoration_is_refused():
    def handler(self, state, ctx):
        return state

    step()(handler)
    with pytest.raises(ValueError, match=r"already has OpenRath node metadata$") as excinfo:
        router(successors=("x",))(handler)
    assert str(excinfo.value) == (
        "test_double_decoration_is_refused.<locals>.handler already has OpenRath node metadata"
    )


def test_non_idempotent_retries_require_an_idempotency_key():
    def handler(self, state, ctx):
        return state

    with pytest.raises(ValueError, match=r"^non-idempotent retries require idempotency_key$"):
        step(retry=RetryPolicy(max_attempts=2))(handler)
    assert node_meta(handler) is None  # nothing was recorded

    # the same policy is fine with a key, or with another effect class
    assert node_meta(step(retry=RetryPolicy(max_attempts=2), idempotency_key="k")(handler))

    def other(self, state, ctx):
        return state

    assert node_meta(step(retry=RetryPolicy(max_attempts=2), effects="idempotent")(other))


@pytest.mark.parametrize("timeout", [0, -1, 0.0, -0.001])
def test_timeout_must_be_positive(timeout):
    with pytest.raises(ValueError, match=r"^node timeout_seconds must be greater than zero$"):
        step(timeout_seconds=timeout)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"successors": "price"},
            TypeError,
            "successors must be a tuple of node names, not the string 'price'",
        ),
        ({"successors": ("a", "")}, TypeError, "successor names must be non-empty strings, got ''"),
        ({"successors": ("a", 3)}, TypeError, "successor names must be non-empty strings, got 3"),
        ({"retry": 3}, TypeError, "retry must be a RetryPolicy or None, got 3"),
        ({"timeout_seconds": "5"}, TypeError, "timeout_seconds must be a number or None, got '5'"),
        (
            {"timeout_seconds": float("inf")},
            ValueError,
            "node timeout_seconds must be finite; use None for no timeout",
        ),
        (
            {"idempotency_key": "  "},
            ValueError,
            "idempotency_key must be a non-empty string or None",
        ),
        (
            {"effects": "risky"},
            ValueError,
            "unknown effect class 'risky'; expected one of: none, read_only, idempotent, "
            "non_idempotent",
        ),
    ],
)
def test_step_argument_checks(kwargs, error, message):
    with pytest.raises(error) as excinfo:
        step(**kwargs)
    assert str(excinfo.value) == message


def test_router_refuses_a_string_of_successors():
    with pytest.raises(TypeError) as excinfo:
        router(successors="ship")
    assert str(excinfo.value) == "successors must be a tuple of node names, not the string 'ship'"


def test_duplicate_successor_is_refused():
    def choose(self, state):
        return "a"

    with pytest.raises(ValueError, match=r"more than once$") as excinfo:
        router(successors=("a", "b", "a"))(choose)
    assert str(excinfo.value) == (
        "test_duplicate_successor_is_refused.<locals>.choose lists successor 'a' more than once"
    )


def test_node_meta_refuses_foreign_metadata():
    def handler(self, state, ctx):
        return state

    class ForeignMeta:  # e.g. rath.definition.decorators._NodeMetadata
        pass

    setattr(handler, NODE_SPEC_ATTR, ForeignMeta())
    with pytest.raises(TypeError) as excinfo:
        node_meta(handler)
    assert str(excinfo.value) == (
        "test_node_meta_refuses_foreign_metadata.<locals>.handler carries node metadata from "
        "another package (tests.runs_app.test_authoring); import step and router from "
        "openrath_project.flow"
    )

    def plain(self, state, ctx):
        return state

    assert node_meta(plain) is None


def test_ported_openrath_metadata():
    pipeline = openrath_style.OrderPipeline
    assert node_meta(pipeline.price) == NodeMeta(
        kind="step",
        entry=False,
        successors=("route",),
        retry=RetryPolicy(max_attempts=3, base_seconds=0.01, max_seconds=0.05),
        effects=EffectClass.IDEMPOTENT,
    )
    refund = openrath_style.RefundWorkflow
    assert node_meta(refund.pay) == NodeMeta(
        kind="step",
        entry=False,
        successors=(),
        retry=RetryPolicy(max_attempts=2),
        effects=EffectClass.NON_IDEMPOTENT,
        idempotency_key="refund-payment",
    )
    assert node_meta(refund.lookup) == NodeMeta(
        kind="step",
        entry=True,
        successors=("approve",),
        effects=EffectClass.READ_ONLY,
        timeout_seconds=5.0,
    )


# -- Workflow ---------------------------------------------------------------------------------


class Described(Workflow):
    description = "from the class"


class Leaf(Workflow):
    pass


def test_description_class_attribute_is_kept_unless_overridden():
    assert Workflow().description == ""
    assert Described().description == "from the class"
    assert Described(description="given").description == "given"
    assert Described.description == "from the class"
    assert openrath_style.OrderPipeline().description == (
        "validate -> price -> route -> (ship | manual_review)"
    )


def test_workflow_class_defaults():
    assert Workflow.name is None
    assert Workflow.workflow_version == "1"
    assert openrath_style.OrderPipeline.workflow_version == "3"


def test_forward_is_not_implemented_with_a_helpful_message():
    with pytest.raises(NotImplementedError) as excinfo:
        Leaf()("session")
    assert str(excinfo.value) == (
        "Leaf.forward(session) is not implemented: define forward(self, session) to call this "
        "workflow eagerly, or start a durable run of its @step methods"
    )


def test_call_runs_forward():
    class Upper(Workflow):
        def forward(self, session):
            return session.upper()

    assert Upper()("abc") == "ABC"


def test_children_are_tracked_and_listed_by_name_as_in_openrath():
    class Parent(Workflow):
        def __init__(self):
            super().__init__(description="parent")
            self.second = Leaf()
            self.first = Leaf()
            self.label = "not a workflow"

    parent = Parent()
    assert [name for name, _child in parent.named_children()] == ["first", "second"]
    assert list(parent.children()) == [parent.first, parent.second]
    assert parent.modules() == [parent, parent.first, parent.second]

    parent.second = "replaced"  # no longer a workflow: no longer a child
    assert [name for name, _child in parent.named_children()] == ["first"]
    del parent.first
    assert parent.named_children() == ()
    assert repr(parent) == "Parent()"


def test_children_tracked_without_super_init_and_nested_repr():
    class Careless(Workflow):
        def __init__(self):  # forgets super().__init__()
            self.inner = Leaf()

    class Outer(Workflow):
        def __init__(self):
            super().__init__()
            self.careless = Careless()

    outer = Outer()
    assert outer.careless.named_children() == (("inner", outer.careless.inner),)
    assert repr(outer) == "Outer(\n  (careless): Careless(\n    (inner): Leaf()\n  )\n)"


def test_workflow_name():
    class Named(Workflow):
        name = "refunds"

    class Inherits(Named):
        pass

    assert workflow_name(Named) == "refunds"
    assert workflow_name(Named()) == "refunds"
    assert workflow_name(Inherits) == "refunds"
    assert workflow_name(openrath_style.OrderPipeline) == (
        "tests.runs_app.workflows.openrath_style.OrderPipeline"
    )
    assert workflow_name(Leaf()) == "tests.runs_app.test_authoring.Leaf"


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("", TypeError, "got ''"),
        (3, TypeError, "got 3"),
        (" padded", ValueError, "must not start or end with whitespace: ' padded'"),
    ],
)
def test_workflow_name_must_be_a_clean_string(value, error, message):
    bad = type("Bad", (Workflow,), {"name": value})
    with pytest.raises(error) as excinfo:
        workflow_name(bad)
    prefix = "tests.runs_app.test_authoring.Bad.name "
    expected = {
        TypeError: f"{prefix}must be a non-empty string, {message}",
        ValueError: f"{prefix}{message}",
    }[error]
    assert str(excinfo.value) == expected
