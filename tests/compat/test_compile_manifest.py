"""Example 12: ``Workflow.compile()`` — the static resource manifest and ``validate()``."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project import flow
from openrath_project.flow import AgentParam
from openrath_project.llm import Provider
from runs_app.static_compile import SELECTOR_REASON, DynamicNode


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("OPENRATH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENRATH_PROVIDER_CONFIG", str(tmp_path / "none.json"))
    (tmp_path / "none.json").write_text("{}")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


class Specialist(flow.Workflow):
    def __init__(self, prompt: str, model: str) -> None:
        super().__init__(description=prompt)
        self.agent = AgentParam(provider=Provider(model=model, api_key="sk-example"))

    def forward(self, session: Any) -> Any:
        return session


class ResearchTeam(flow.Workflow):
    def __init__(self) -> None:
        super().__init__(description="research team")
        self.triage = Specialist("Triage quickly.", "gpt-5.5")
        self.deep = Specialist("Answer in depth.", "claude-sonnet-4-6")
        self.summarizer = AgentParam(provider=Provider(model="gpt-5.5", api_key="sk-example"))

    def forward(self, session: Any) -> Any:
        return session


def test_example_12_manifest_validate_and_lifecycle() -> None:
    team = ResearchTeam()

    compiled = team.compile()

    manifest = compiled.manifest
    assert manifest.provider_models() == ["claude-sonnet-4-6", "gpt-5.5"]
    assert manifest.provider_kinds() == ["openai"]
    assert [(a.path, a.provider.model, a.has_memory) for a in manifest.agents] == [
        ("summarizer", "gpt-5.5", False),
        ("deep.agent", "claude-sonnet-4-6", False),
        ("triage.agent", "gpt-5.5", False),
    ]
    assert manifest.dynamic_nodes == []
    assert compiled.validate() == []
    assert repr(compiled).endswith(", agents=3, dynamic_nodes=0)")
    assert "sk-example" not in repr(compiled)
    assert compiled.execution_plan is None  # an eager workflow has no durable plan
    with team.compile() as live:
        assert len(live.manifest.agents) == 3
    assert compiled("a session") == "a session"  # callable like the workflow


def test_selectors_are_dynamic_agents_are_collected_and_missing_keys_are_problems() -> None:
    class Desk(flow.Workflow):
        def __init__(self) -> None:
            super().__init__()
            provider = Provider(model="m1")
            self.router = flow.Selector(provider)
            self.helper = flow.Agent("Help.", provider, memory="local")
            self.shrink = flow.Compressor("Shorter.", provider)

        def forward(self, session: Any) -> Any:
            return session

    compiled = Desk().compile()

    assert [(a.path, a.has_memory) for a in compiled.manifest.agents] == [
        ("helper.agent", True),
        ("router.agent", False),
        ("shrink.agent", False),
    ]
    assert compiled.manifest.dynamic_nodes == [DynamicNode("router", "selector", SELECTOR_REASON)]
    problem = (
        "no api credential resolves for provider_kind='openai' (set Provider.api_key, the "
        "vendor env var, or a config provider)"
    )
    assert compiled.validate() == [
        f"agent 'helper.agent': {problem}",
        f"agent 'router.agent': {problem}",
        f"agent 'shrink.agent': {problem}",
    ]
    with pytest.raises(ValueError, match="^workflow pre-flight validation failed:\n  - agent"):
        compiled.validate(raise_on_error=True)


def test_validate_names_an_unbound_or_unknown_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    class Odd:
        kind = "mystery"
        model = "x"

    class Loose(flow.Workflow):
        def __init__(self) -> None:
            super().__init__()
            self.empty = AgentParam()
            self.odd = AgentParam(provider=Odd())

    assert Loose().compile().validate() == [
        "agent 'empty': no provider is bound",
        "agent 'odd': unknown provider_kind='mystery' (registered: "
        "['anthropic', 'atlascloud', 'openai', 'scripted'])",
    ]


def test_agent_param_to_rebinds_the_provider() -> None:
    param = AgentParam(provider=Provider(model="a"))
    assert param.to(model="b").provider.model == "b"
    other = Provider(kind="scripted", fixture=[])
    assert param.to(other).provider is other
    with pytest.raises(TypeError, match="takes a Provider"):
        param.to("gpt")
    with pytest.raises(ValueError, match="nothing to bind"):
        param.to()
