"""Workflow discovery and registration (no database)."""

from __future__ import annotations

import threading

import pytest

from openrath_project.errors import ValidationFailed
from runs_app import registry as registry_module
from runs_app.authoring import step
from runs_app.plan import PlanError, compile_workflow
from runs_app.registry import (
    RegisteredWorkflow,
    RegistryError,
    UnknownWorkflow,
    WorkflowRegistry,
    default_registry,
    discover,
    get,
    register,
)
from sessions_app.workflow import Workflow
from tests.runs_app import TempModules
from tests.runs_app.workflows import fanout, openrath_style


@pytest.fixture
def modules(tmp_path):
    temp = TempModules(tmp_path / "modules")
    yield temp
    temp.close()


@pytest.fixture
def registry():
    return WorkflowRegistry()


FLOWS_A = """
from runs_app.authoring import router, step
from sessions_app.workflow import Workflow
from tests.runs_app.workflows.openrath_style import OrderPipeline  # imported: not registered


class SharedBase(Workflow):  # no steps: not registered
    description = "base"


class Alpha(SharedBase):
    name = "alpha"

    @step(entry=True)
    def only(self, state, ctx):
        return state


class Beta(Workflow):  # no name: module.qualname
    @step(entry=True, successors=("pick",))
    def start(self, state, ctx):
        return state

    @router(successors=("start", "end"))
    def pick(self, state):
        return "end"

    @step()
    def end(self, state, ctx):
        return state


class NotAWorkflow:
    @step(entry=True)
    def only(self, state, ctx):
        return state


def helper():
    return None
"""

FLOWS_B = """
from runs_app.authoring import step
from sessions_app.workflow import Workflow


class AlphaAgain(Workflow):
    name = "alpha"

    @step(entry=True)
    def only(self, state, ctx):
        return state
"""

FLOWS_C = """
from runs_app.authoring import step
from sessions_app.workflow import Workflow


class Gamma(Workflow):
    name = "gamma"

    @step(entry=True)
    def only(self, state, ctx):
        return state
"""


def test_discover_registers_workflows_defined_in_the_listed_modules(modules, registry):
    modules.write("reg_flows.a", FLOWS_A)
    found = registry.discover(["reg_flows.a"])
    assert list(found) == ["alpha", "reg_flows.a.Beta"]
    module = modules.load("reg_flows.a")
    assert found["alpha"] == RegisteredWorkflow(
        name="alpha", cls=module.Alpha, plan=compile_workflow(module.Alpha)
    )
    assert found["reg_flows.a.Beta"].cls is module.Beta
    assert found["reg_flows.a.Beta"].plan.entry == "start"
    assert registry.names() == ["alpha", "reg_flows.a.Beta"]
    assert registry.get("alpha") is found["alpha"]
    assert [entry.name for entry in registry.all()] == ["alpha", "reg_flows.a.Beta"]
    assert "alpha" in registry
    assert "tests.runs_app.workflows.openrath_style.OrderPipeline" not in registry
    assert len(registry) == 2
    assert list(registry) == ["alpha", "reg_flows.a.Beta"]


def test_discover_accepts_a_split_setting_and_is_idempotent(modules, registry):
    modules.write("reg_flows.a", FLOWS_A)
    modules.write("reg_flows.c", FLOWS_C)
    setting = "reg_flows.a, reg_flows.c,,reg_flows.a,"
    first = registry.discover(setting.split(","))
    assert list(first) == ["alpha", "reg_flows.a.Beta", "gamma"]
    again = registry.discover(["reg_flows.c"])
    assert again == {"gamma": first["gamma"]}
    assert again["gamma"] is first["gamma"]
    assert registry.names() == ["alpha", "gamma", "reg_flows.a.Beta"]
    assert registry.discover([]) == {}


def test_duplicate_names_in_one_discovery_name_both_classes(modules, registry):
    modules.write("reg_flows.a", FLOWS_A)
    modules.write("reg_flows.b", FLOWS_B)
    modules.write("reg_flows.c", FLOWS_C)
    with pytest.raises(RegistryError) as excinfo:
        registry.discover(["reg_flows.c", "reg_flows.a", "reg_flows.b"])
    assert str(excinfo.value) == (
        "duplicate workflow name 'alpha': reg_flows.a.Alpha and reg_flows.b.AlphaAgain; "
        "give one of them another `name`"
    )
    assert registry.names() == []  # all or nothing: gamma was not registered either


def test_duplicate_name_against_an_earlier_registration(modules, registry):
    modules.write("reg_flows.a", FLOWS_A)
    modules.write("reg_flows.b", FLOWS_B)
    registry.discover(["reg_flows.a"])
    with pytest.raises(RegistryError) as excinfo:
        registry.discover(["reg_flows.b"])
    assert str(excinfo.value) == (
        "duplicate workflow name 'alpha': reg_flows.a.Alpha and reg_flows.b.AlphaAgain; "
        "give one of them another `name`"
    )
    assert registry.get("alpha").cls is modules.load("reg_flows.a").Alpha


def test_missing_module_is_named(modules, registry):
    modules.write("reg_flows.c", FLOWS_C)
    with pytest.raises(RegistryError) as excinfo:
        registry.discover(["reg_flows.c", "reg_flows.nowhere"])
    assert str(excinfo.value) == (
        "cannot import workflow module 'reg_flows.nowhere': no module named "
        "'reg_flows.nowhere' on the Python path. Put the directory that holds it on PYTHONPATH "
        "(or install it into the project's environment), then restart the server and its "
        "workers; see docs/authoring.md, 'Registering a workflow'"
    )
    assert isinstance(excinfo.value.__cause__, ModuleNotFoundError)
    assert registry.names() == []


def test_a_missing_dependency_of_a_module_is_named_as_such(modules, registry):
    modules.write("reg_flows.needs", "import reg_flows_not_installed_anywhere\n")
    with pytest.raises(RegistryError) as excinfo:
        registry.discover(["reg_flows.needs"])
    assert str(excinfo.value) == (
        "cannot import workflow module 'reg_flows.needs': it imports "
        "'reg_flows_not_installed_anywhere', which is not installed in this environment"
    )


def test_module_failing_at_import_is_named(modules, registry):
    modules.write("reg_flows.broken", "raise RuntimeError('boom at import')\n")
    with pytest.raises(RegistryError) as excinfo:
        registry.discover(["reg_flows.broken"])
    assert str(excinfo.value) == (
        "cannot import workflow module 'reg_flows.broken': RuntimeError: boom at import"
    )
    assert isinstance(excinfo.value.__cause__, RuntimeError)

    modules.write("reg_flows.syntax", "def broken(:\n")
    with pytest.raises(RegistryError, match=r"^cannot import workflow module 'reg_flows.syntax': "):
        registry.discover(["reg_flows.syntax"])


def test_workflow_that_does_not_compile_is_named(modules, registry):
    modules.write(
        "reg_flows.bad",
        """
        from runs_app.authoring import step
        from sessions_app.workflow import Workflow


        class NoEntry(Workflow):
            @step()
            def a(self, state, ctx):
                return state
        """,
    )
    with pytest.raises(RegistryError) as excinfo:
        registry.discover(["reg_flows.bad"])
    assert str(excinfo.value) == (
        "workflow reg_flows.bad.NoEntry in module 'reg_flows.bad' does not compile: "
        "workflow must declare exactly one entrypoint; found 0"
    )
    assert isinstance(excinfo.value.__cause__, PlanError)


def test_register_and_get(registry):
    entry = registry.register(openrath_style.OrderPipeline)
    assert entry == RegisteredWorkflow(
        name="tests.runs_app.workflows.openrath_style.OrderPipeline",
        cls=openrath_style.OrderPipeline,
        plan=compile_workflow(openrath_style.OrderPipeline),
    )
    assert registry.register(openrath_style.OrderPipeline) is entry  # idempotent
    assert registry.get("tests.runs_app.workflows.openrath_style.OrderPipeline") is entry
    assert registry.register(fanout.ResearchFanOut).name == "research-fanout"

    class Impostor(Workflow):
        name = "research-fanout"

        @step(entry=True)
        def only(self, state, ctx):
            return state

    with pytest.raises(RegistryError) as excinfo:
        registry.register(Impostor)
    assert str(excinfo.value) == (
        "duplicate workflow name 'research-fanout': tests.runs_app.workflows.fanout.ResearchFanOut"
        " and tests.runs_app.test_registry.test_register_and_get.<locals>.Impostor; give one of "
        "them another `name`"
    )


def test_register_refuses_what_is_not_a_workflow_class(registry):
    for value in (object, "OrderPipeline", 42):
        with pytest.raises(
            TypeError, match=r"^register\(\) takes a Workflow subclass or instance, got "
        ):
            registry.register(value)
    assert len(registry) == 0
    # an instance is a workflow (OpenRath registers instances): it is what the workers run
    instance = openrath_style.OrderPipeline()
    entry = WorkflowRegistry().register(instance)
    assert entry.cls is openrath_style.OrderPipeline
    assert entry.build() is instance

    class Empty(Workflow):
        pass

    with pytest.raises(PlanError, match=r"has no @step methods$"):
        registry.register(Empty)
    assert registry.names() == []


def test_unknown_workflow(registry):
    registry.register(openrath_style.CountToThree)
    with pytest.raises(UnknownWorkflow) as excinfo:
        registry.get("nope")
    error = excinfo.value
    assert str(error) == "unknown workflow 'nope'"
    assert error.name == "nope"
    assert isinstance(error, KeyError)
    assert isinstance(error, ValidationFailed)
    assert error.status_code == 400
    assert error.as_body() == {
        "error": {
            "code": "unknown_workflow",
            "message": "unknown workflow 'nope'",
            "details": {"workflow": "nope"},
        }
    }


def test_module_helpers_use_the_given_or_default_registry(modules):
    empty = WorkflowRegistry()
    assert len(empty) == 0  # falsy, and still the one used below

    @register
    class Defaulted(Workflow):
        name = "test-registry-defaulted"

        @step(entry=True)
        def only(self, state, ctx):
            return state

    try:
        assert get("test-registry-defaulted").cls is Defaulted
        assert registry_module.default_registry is default_registry
        assert register(Defaulted, registry=empty) is Defaulted
        assert get("test-registry-defaulted", registry=empty).cls is Defaulted
        modules.write("reg_flows.c", FLOWS_C)
        assert list(discover(["reg_flows.c"], registry=empty)) == ["gamma"]
        assert "gamma" not in default_registry
        with pytest.raises(UnknownWorkflow):
            get("gamma")
    finally:
        default_registry._workflows.pop("test-registry-defaulted", None)


def test_clear(registry):
    registry.register(openrath_style.CountToThree)
    registry.clear()
    assert registry.names() == []


def test_concurrent_registration_of_one_class_yields_one_entry(registry):
    results: list[RegisteredWorkflow] = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        results.append(registry.register(openrath_style.RefundWorkflow))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(result is results[0] for result in results)
    assert registry.names() == ["tests.runs_app.workflows.openrath_style.RefundWorkflow"]
