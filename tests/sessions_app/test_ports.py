"""The sessions app's ports: the workflow compiler and the agent memory, installed by the shell.

``sessions_app`` sits below the runs and memory apps, so ``Workflow.compile()`` and
``Agent(memory=...)`` call what the shell installed when Django started
(``openrath_project.server``); without it they say how to get it instead of failing obscurely.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from memory_app.agent_memory import ProjectMemory
from memory_app.models import MemoryEntry
from openrath_project.definition import compile_plan
from openrath_project.server.ports import RunsCompiler
from runs_app.authoring import step
from runs_app.static_compile import CompiledWorkflow
from sessions_app import agent_memory
from sessions_app import workflow as workflow_module
from sessions_app.agents import Agent
from sessions_app.providers import make_provider
from sessions_app.workflow import Workflow, installed_compiler


class Checkout(Workflow):
    name = "ports-checkout"

    @step(entry=True)
    def pay(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return state


def test_django_start_installed_the_shells_compiler_and_memory() -> None:
    assert type(installed_compiler("compile")) is RunsCompiler
    assert type(agent_memory.installed_agent_memory()) is ProjectMemory


def test_the_workflow_methods_go_through_the_installed_compiler() -> None:
    revision = uuid.UUID("00000000-0000-0000-0000-000000000007")
    compiled = Checkout().compile()
    assert type(compiled) is CompiledWorkflow
    assert compiled.execution_plan.name == "ports-checkout"
    plan = Checkout().compile_plan(revision_id=revision)
    assert (plan.id, plan.definition_hash, plan.revision_id) == (
        compile_plan(Checkout, revision_id=revision).id,
        compile_plan(Checkout).definition_hash,
        revision,
    )
    assert Checkout().inspect_resources().agents == []


@pytest.mark.parametrize("operation", ["compile", "compile_plan", "inspect_resources"])
def test_without_a_compiler_each_method_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    monkeypatch.setattr(workflow_module, "_compiler", None)
    with pytest.raises(RuntimeError) as raised:
        getattr(Checkout(), operation)()
    assert str(raised.value) == (
        f"Workflow.{operation}() needs the workflow compiler, which is installed when Django "
        "starts (the openrath_project.server app): use workflows through "
        "`from openrath_project import flow` (its first use starts Django), or call "
        "django.setup() first"
    )


@pytest.mark.django_db
def test_an_agent_without_installed_memory_refuses_before_writing(
    monkeypatch: pytest.MonkeyPatch, project: Any
) -> None:
    monkeypatch.setattr(agent_memory, "_memory", None)
    agent = Agent(
        "Remember things.",
        make_provider("scripted", turns=[]),
        name="keeper",
        memory="local",
        project=project,
    )
    with pytest.raises(RuntimeError, match=r"^agent memory is not installed: "):
        agent.remember_memory("The office moved to Rue Neuve.")
    assert MemoryEntry.objects.count() == 0


@pytest.mark.django_db
def test_the_installed_memory_is_the_memory_apps(project: Any) -> None:
    agent = Agent(
        "Remember things.",
        make_provider("scripted", turns=[]),
        name="keeper",
        memory="local",
        project=project,
    )
    written = agent.remember_memory("The office moved to Rue Neuve.", category="places")
    stored = MemoryEntry.objects.get()
    assert (stored.project_id, stored.scope, stored.text) == (
        project.id,
        "project",
        "The office moved to Rue Neuve.",
    )
    assert written.uri == f"memory://user/memories/places/{stored.id.hex}"
    found = agent.recall_memory("office")
    assert [hit.id for hit in found.hits] == [stored.id]
