"""OpenRath 2.0's example 12 (``Workflow.compile()``), imports changed; no model.

A workflow with two nested workflows that each hold an ``AgentParam`` and one ``AgentParam`` of
its own; compiling it lists the three agents and their models, finds nothing to complain about
and works as a context manager.
"""

from openrath_project import flow
from openrath_project.flow.agent_param import AgentParam
from openrath_project.llm import Provider
from openrath_project.session import Session


def param(prompt, model):
    return AgentParam(
        agent_session=Session.from_agent_prompt(prompt),
        provider=Provider(model=model, api_key="sk-not-used"),
    )


class Specialist(flow.Workflow):
    def __init__(self, prompt, model):
        super().__init__(description=prompt)
        self.agent = param(prompt, model)

    def forward(self, session):
        return session


class Team(flow.Workflow):
    def __init__(self):
        super().__init__(description="team")
        self.triage = Specialist("Triage.", "model-a")
        self.deep = Specialist("Go deep.", "model-b")
        self.summarizer = param("Summarise.", "model-a")

    def forward(self, session):
        return session


compiled = Team().compile()
manifest = compiled.manifest
print("models:", manifest.provider_models())
print("agents:", sorted((a.path, a.provider.model, a.has_memory) for a in manifest.agents))
print("dynamic nodes:", len(manifest.dynamic_nodes))
print("problems:", compiled.validate() or "none")
print("repr ends:", repr(compiled).rstrip().endswith("agents=3, dynamic_nodes=0)"))
with Team().compile() as live:
    print("inside:", len(live.manifest.agents))
