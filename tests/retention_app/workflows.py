"""Workflows the retention tests run: a run whose state grows every step (mostly deltas)."""

from __future__ import annotations

from openrath_project import flow


class Grow(flow.Workflow):
    """Six steps, each appending a chunk and a note to the state (so checkpoints after the
    first are deltas)."""

    name = "retention-grow"

    def _grown(self, state, ctx, step):
        ctx.session.append(f"{step} for {state.get('who', 'nobody')}", role="assistant")
        return {**state, "notes": [*state.get("notes", []), step], "last": step}

    @flow.step(entry=True, successors=("two",), effects="none")
    def one(self, state, ctx):
        return self._grown(state, ctx, "one")

    @flow.step(successors=("three",), effects="none")
    def two(self, state, ctx):
        return self._grown(state, ctx, "two")

    @flow.step(successors=("four",), effects="none")
    def three(self, state, ctx):
        return self._grown(state, ctx, "three")

    @flow.step(successors=("five",), effects="none")
    def four(self, state, ctx):
        return self._grown(state, ctx, "four")

    @flow.step(successors=("six",), effects="none")
    def five(self, state, ctx):
        return self._grown(state, ctx, "five")

    @flow.step(effects="none")
    def six(self, state, ctx):
        return self._grown(state, ctx, "six")
