"""Helpers of the OpenRath-compatibility tests: scripted turns and a stream recorder."""

from __future__ import annotations

import json
from typing import Any

from openrath_project.llm import Provider, RathLLMStreamDelta


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted tool call."""
    return {"id": call_id, "name": name, "arguments": arguments}


def scripted(*turns: dict[str, Any]) -> Any:
    """A scripted provider handing out ``turns`` in order (OpenRath's Provider call form)."""
    return Provider(kind="scripted", fixture=list(turns))


def tool_result_outputs(session: Any) -> list[Any]:
    """The ``output`` (or ``error``) of every tool result chunk, in order."""
    found = []
    for chunk in session.chunks:
        if chunk.kind == "tool_result":
            content = chunk.content
            found.append(content["output"] if "error" not in content else content["error"])
    return found


class Recorder:
    """An ``on_event`` callback that keeps every delta and prints like OpenRath's example 07."""

    def __init__(self) -> None:
        self.deltas: list[RathLLMStreamDelta] = []
        self.printed: list[str] = []

    def __call__(self, delta: RathLLMStreamDelta) -> None:
        self.deltas.append(delta)
        if delta.content_delta:
            self.printed.append(delta.content_delta)
        if delta.finish_reason is not None:
            self.printed.append(f"\n[finish_reason={delta.finish_reason}]\n")

    @property
    def text(self) -> str:
        return "".join(self.printed)


def request_tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
