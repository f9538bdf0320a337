"""A workflow for the run-compare tests: four steps, each appending one chunk that names the
run's ``tag``; steps two and four record an idempotent effect keyed by the tag (so a fork with
another tag never meets its ancestor's effect under the same key)."""

from __future__ import annotations

from openrath_project import flow

NOTES: list[str] = []
#: What step three says after its name (the console's replay test changes it: "new code").
THREE = {"suffix": ""}


def record_note(text: str, idempotency_key: str = "") -> dict:
    NOTES.append(text)
    return {"noted": text}


def _step(name: str, state: dict, ctx: flow.StepContext, *, effect: bool = False) -> dict:
    tag = state.get("tag", "main")
    ctx.session.append(f"{name} {tag}", role="assistant")
    out = {**state, "steps": [*state.get("steps", []), name]}
    if effect:
        receipt = ctx.effect(f"note-{tag}", record_note, f"{name}:{tag}", idempotent=True)
        out["receipts"] = [*state.get("receipts", []), receipt["noted"]]
    return out


class CompareSteps(flow.Workflow):
    name = "compare_steps"
    description = "four steps, one chunk each, an effect in steps two and four"

    @flow.step(entry=True, successors=("two",), effects="none")
    def one(self, state, ctx):
        return _step("one", state, ctx)

    @flow.step(successors=("three",), effects="idempotent")
    def two(self, state, ctx):
        return _step("two", state, ctx, effect=True)

    @flow.step(successors=("four",), effects="none")
    def three(self, state, ctx):
        return _step("three" + THREE["suffix"], state, ctx)

    @flow.step(effects="idempotent")
    def four(self, state, ctx):
        return _step("four", state, ctx, effect=True)
