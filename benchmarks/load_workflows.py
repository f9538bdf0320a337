"""The short workflow the HTTP load test runs: three steps, each appending a chunk."""

from __future__ import annotations

from typing import Any

from openrath_project import flow


class LoadShort(flow.Workflow):
    name = "load_short"
    description = "Three quick steps, each appending a chunk."

    @flow.step(entry=True, successors=("work",), effects="none")
    def read(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.session.append("read the request", role="assistant", agent="loader")
        return {**state, "read": True}

    @flow.step(successors=("answer",), effects="none")
    def work(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.session.append("did the work", role="assistant", agent="loader")
        return {**state, "worked": True}

    @flow.step(effects="none")
    def answer(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.session.append("here is the answer", role="assistant", agent="loader")
        return {**state, "answered": True}
