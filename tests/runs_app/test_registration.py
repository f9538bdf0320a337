"""The process registry: the product's demo workflows next to the user's modules."""

from __future__ import annotations

import pytest

from runs_app import registration
from runs_app.registry import RegistryError, WorkflowRegistry
from tests.runs_app import TempModules

USER_FLOWS = """
from openrath_project import flow


class Mine(flow.Workflow):
    name = "mine"

    @flow.step(entry=True)
    def only(self, state, ctx):
        return state
"""


@pytest.fixture
def fresh_registry(monkeypatch, tmp_path):
    fresh = WorkflowRegistry()
    monkeypatch.setattr(registration, "default_registry", fresh)
    monkeypatch.setattr(registration, "_discovered", False)
    temp = TempModules(tmp_path / "modules")
    yield fresh, temp
    temp.close()


def test_user_modules_are_registered_beside_the_demo(settings, fresh_registry):
    registry, modules = fresh_registry
    modules.write("user_flows_a", USER_FLOWS)
    settings.OPENRATH_WORKFLOW_MODULES = ["user_flows_a"]
    settings.OPENRATH_DEMO_WORKFLOW_MODULES = ["openrath_project.examples.research_team"]
    assert registration.workflows() is registry
    assert registry.names() == ["mine", "research_team"]


def test_the_demo_can_be_left_out(settings, fresh_registry):
    registry, modules = fresh_registry
    modules.write("user_flows_b", USER_FLOWS)
    settings.OPENRATH_WORKFLOW_MODULES = ["user_flows_b"]
    settings.OPENRATH_DEMO_WORKFLOW_MODULES = []
    assert registration.workflows().names() == ["mine"]


def test_a_module_off_the_path_is_one_readable_error_until_it_is_fixed(settings, fresh_registry):
    registry, modules = fresh_registry
    settings.OPENRATH_WORKFLOW_MODULES = ["user_flows_c"]
    settings.OPENRATH_DEMO_WORKFLOW_MODULES = []
    with pytest.raises(RegistryError, match=r"^cannot import workflow module 'user_flows_c': no "):
        registration.workflows()
    assert registry.names() == []
    modules.write("user_flows_c", USER_FLOWS)  # placed on the path: the next use registers it
    assert registration.workflows().names() == ["mine"]


def test_the_problem_is_one_line_whatever_the_module_raised(settings, fresh_registry):
    registry, modules = fresh_registry
    modules.write("user_flows_d", 'raise RuntimeError("first line\\n  second line")\n')
    settings.OPENRATH_WORKFLOW_MODULES = ["user_flows_d"]
    settings.OPENRATH_DEMO_WORKFLOW_MODULES = []
    assert registration.workflow_modules_problem() == (
        "cannot import workflow module 'user_flows_d': RuntimeError: first line second line"
    )
    assert registry.names() == []
    modules.write("user_flows_d", USER_FLOWS)
    assert registration.workflow_modules_problem() is None
    assert registry.names() == ["mine"]
