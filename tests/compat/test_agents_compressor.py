"""Example 08: ``flow.Compressor(instruction, provider)`` shrinks a session to one summary row."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project import flow
from tests.compat.support import Recorder, scripted

pytestmark = pytest.mark.django_db


def test_example_08_compress_in_openraths_argument_order(project: Any) -> None:
    agent = flow.Agent(
        "You are verbose.",
        scripted({"text": "A sandbox backend is where tools run, like a lab bench."}),
        system_tools=False,
    )
    session = flow.Session.from_user_message("What is a sandbox backend?", project=project).to(
        "local"
    )
    session = agent(session)
    before = len(session.chunks)

    recorder = Recorder()
    compressor = flow.Compressor(
        "Summarize the conversation so far into a single concise message.",
        scripted({"text": "Sandbox = where tools run.", "usage": {"prompt_tokens": 40}}),
        on_event=recorder,
    )
    compressed = compressor.forward(session)

    assert (before, len(compressed.chunks)) == (2, 1)
    [row] = compressed.chunks
    # One user-side row, as OpenRath 2.0's run_session_compress produces.
    assert (row.role, row.kind, row.text) == ("user", "summary", "Sandbox = where tools run.")
    assert compressor.instruction.startswith("Summarize the conversation so far")
    assert recorder.text == "Sandbox = where tools run.\n[finish_reason=stop]\n"
    assert compressed.usage["prompt_tokens"] == 40
    assert compressed.placement == session.placement
    assert [(e.op, e.parent_id) for e in compressed.row.parent_edges.all()] == [
        ("compress", session.id)
    ]


def test_both_argument_orders_and_clear_errors() -> None:
    provider = scripted()
    assert flow.Compressor(provider, instruction="Short.").instruction == "Short."
    assert flow.Compressor("Short.", provider).provider is provider
    with pytest.raises(TypeError, match="the provider is missing"):
        flow.Compressor("Short.")
    with pytest.raises(TypeError, match="the instruction is given twice"):
        flow.Compressor("Short.", provider, instruction="Other.")
    assert isinstance(flow.Compressor(provider), flow.Workflow)
