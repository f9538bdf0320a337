"""Chunk validation, without a database."""

from __future__ import annotations

import pytest

from sessions_app.chunk_rules import ChunkInvalid, ChunkTooLarge, make_draft, usage_totals


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"role": "robot", "content": {"text": "x"}}, "role"),
        ({"role": "user", "kind": "poem", "content": {"text": "x"}}, "kind"),
        ({"role": "user", "content": "x"}, "content"),
        ({"role": "user", "content": {"txt": "x"}}, "content.text"),
        (
            {
                "role": "user",
                "kind": "tool_call",
                "content": {"id": "1", "name": "f", "arguments": {}},
            },
            "role",
        ),
        (
            {"role": "assistant", "kind": "tool_call", "content": {"name": "f", "arguments": {}}},
            "content.id",
        ),
        (
            {"role": "tool", "kind": "tool_result", "content": {"tool_call_id": "1", "name": "f"}},
            "content.output",
        ),
        (
            {
                "role": "tool",
                "kind": "tool_result",
                "content": {"tool_call_id": "1", "name": "f", "output": 1, "error": 5},
            },
            "content.error",
        ),
        ({"role": "user", "content": {"text": "x"}, "trust": "maybe"}, "trust"),
        (
            {"role": "user", "content": {"text": "x"}, "usage": {"prompt_tokens": -1}},
            "usage.prompt_tokens",
        ),
        ({"role": "tool", "kind": "message", "content": {"text": "x"}}, "role"),
    ],
)
def test_invalid_chunks_name_the_field(kwargs, field):
    with pytest.raises(ChunkInvalid) as info:
        make_draft(**kwargs)
    assert info.value.field == field


def test_size_limit():
    with pytest.raises(ChunkTooLarge, match="limit is 100 bytes"):
        make_draft(role="user", content={"text": "x" * 200}, max_bytes=100)


def test_defaults():
    result = make_draft(
        role="tool", kind="tool_result", content={"tool_call_id": "c1", "name": "ls", "output": []}
    )
    assert (result.trust, result.tool_call_id) == ("untrusted", "c1")
    call = make_draft(
        role="assistant", kind="tool_call", content={"id": "c1", "name": "ls", "arguments": {}}
    )
    assert (call.trust, call.tool_call_id) == ("trusted", "c1")


def test_usage_totals():
    drafts = [
        make_draft(
            role="assistant",
            content={"text": "a"},
            usage={"prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.5},
        ),
        make_draft(
            role="assistant",
            content={"text": "b"},
            usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        ),
        make_draft(role="user", content={"text": "c"}),
    ]
    assert usage_totals(drafts) == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "cost_usd": 0.5,
    }
