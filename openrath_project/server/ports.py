"""The ports the sessions app defines, filled in here, by the shell, when Django starts.

The sessions app sits below the runs and memory apps, so it cannot import what two of its
OpenRath-compatible calls need; it calls a port, and :func:`install_ports` (from
:meth:`ServerConfig.ready <openrath_project.server.apps.ServerConfig.ready>`) installs:

* ``sessions_app.workflow.Compiler``: ``Workflow.compile()`` and ``inspect_resources()`` (the runs
  app's static pass) and ``Workflow.compile_plan()`` (``openrath_project.definition``);
* ``sessions_app.agent_memory.AgentMemory``: what ``flow.Agent(memory=...)`` recalls, commits and
  keeps notes in (``memory_app.agent_memory.ProjectMemory``).

Every Django process runs this (the server, workers, ``manage.py``, pytest-django), and so does
a plain script on its first ``flow`` name (``openrath_project.library.ensure_ready``). The
streaming hooks (``sessions_app.streaming``) are different: their Channels publisher is installed
per process by the entry points that want it (ASGI, Celery, ``run_worker``).
"""

from __future__ import annotations

import uuid

from memory_app.agent_memory import ProjectMemory
from openrath_project.definition import CompiledPlan, compile_plan
from runs_app.static_compile import CompiledWorkflow, ResourceManifest, collect_manifest
from sessions_app.agent_memory import install_agent_memory
from sessions_app.workflow import Workflow, install_compiler


class RunsCompiler:
    """``sessions_app.workflow.Compiler`` on the runs app's static pass and OpenRath's plan
    compiler."""

    def compile(self, workflow: Workflow) -> CompiledWorkflow:
        return CompiledWorkflow(workflow)

    def compile_plan(self, workflow: Workflow, *, revision_id: uuid.UUID | None) -> CompiledPlan:
        return compile_plan(workflow, revision_id=revision_id)

    def inspect_resources(self, workflow: Workflow) -> ResourceManifest:
        return collect_manifest(workflow)


def install_ports() -> None:
    """Install the compiler and the agent memory (idempotent: each call replaces them)."""
    install_compiler(RunsCompiler())
    install_agent_memory(ProjectMemory())
