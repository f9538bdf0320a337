"""A workflow that talks to a model with a canary key (and fails on a 400 that echoes it)."""

from __future__ import annotations

from openrath_project import flow


class Canary(flow.Workflow):
    name = "canary"

    def _agent(self, state: dict) -> flow.Agent:
        provider = flow.Provider(
            "openai", base_url=state["base_url"], model="gpt-test", max_retries=0
        )
        return flow.Agent("You answer briefly.", provider, name="asker")

    @flow.step(entry=True, successors=("again",), effects="none")
    def ask(self, state, ctx):
        self._agent(state)(ctx.session)
        return {**state, "answer": ctx.session.text()}

    @flow.step(effects="none")
    def again(self, state, ctx):
        self._agent(state)(ctx.session)  # the model API answers 400, echoing the key
        return state
