"""The scripted provider: sequence and rules modes, streaming, exhaustion, JSON fixtures."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sessions_app.providers import (
    ModelTurn,
    Provider,
    ScriptedProvider,
    ScriptExhausted,
    ToolCallRequest,
    Usage,
    base,
    create_provider,
    make_provider,
    register_provider,
    registered_kinds,
)
from sessions_app.providers.scripted import split_deltas

USER = [{"role": "user", "content": "Please read notes.txt"}]  # 21 characters


def test_sequence_mode_hands_out_turns_in_order() -> None:
    provider = ScriptedProvider(
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
            {"text": "The notes say hi.", "usage": {"prompt_tokens": 40, "completion_tokens": 6}},
        ]
    )

    first = provider.complete(USER)
    second = provider.complete(USER)

    assert first == ModelTurn(
        text=None,
        tool_calls=(
            ToolCallRequest(id="call_0_0", name="read_file", arguments='{"path": "notes.txt"}'),
        ),
        # prompt: 21 chars // 4 = 5; completion: 0 // 4 + 5 * 1 call = 5
        usage=Usage(prompt_tokens=5, completion_tokens=5, total_tokens=10),
        model="scripted-1",
        provider="scripted",
        finish_reason="tool_calls",
    )
    assert second == ModelTurn(
        text="The notes say hi.",
        tool_calls=(),
        usage=Usage(prompt_tokens=40, completion_tokens=6, total_tokens=46),
        model="scripted-1",
        provider="scripted",
        finish_reason="stop",
    )
    assert provider.position == 2


def test_exhausting_the_sequence_raises_a_clear_error() -> None:
    provider = ScriptedProvider([{"text": "only one"}])
    provider.complete(USER)

    with pytest.raises(ScriptExhausted) as caught:
        provider.complete(USER)

    assert str(caught.value) == (
        "scripted provider <inline>: all 1 turn(s) used; call 2 has no turn left"
    )


def test_default_usage_counts_message_characters_and_has_a_floor() -> None:
    provider = ScriptedProvider([{"text": ""}, {"text": "x" * 40}])
    messages = [
        {"role": "system", "content": "s" * 10},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "ab", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "t" * 20},
    ]  # 10 + (2 + 2) + 20 = 34 characters

    assert provider.complete([]).usage == Usage(1, 1, 2)
    assert provider.complete(messages).usage == Usage(8, 10, 18)


def test_explicit_ids_and_string_arguments_pass_through() -> None:
    provider = ScriptedProvider(
        [
            {
                "tool_calls": [
                    {"id": "call_custom", "name": "add", "arguments": '{"a": 1, "b": '},
                    {"name": "add", "arguments": {"a": 1, "b": 2}},
                ]
            }
        ]
    )

    turn = provider.complete(USER)

    assert turn.tool_calls == (
        ToolCallRequest(id="call_custom", name="add", arguments='{"a": 1, "b": '),
        ToolCallRequest(id="call_0_1", name="add", arguments='{"a": 1, "b": 2}'),
    )


def test_streaming_default_deltas_are_word_sized_and_join_to_the_text() -> None:
    provider = ScriptedProvider([{"text": "Hello there,  world!\nBye"}])
    deltas: list[str] = []

    turn = provider.complete(USER, on_delta=deltas.append)

    assert deltas == ["Hello ", "there,  ", "world!\n", "Bye"]
    assert "".join(deltas) == turn.text


def test_streaming_explicit_deltas() -> None:
    provider = ScriptedProvider([{"text": "abcdef", "stream": ["ab", "cde", "f"]}])
    deltas: list[str] = []

    provider.complete(USER, on_delta=deltas.append)

    assert deltas == ["ab", "cde", "f"]


def test_stream_that_does_not_join_to_text_is_rejected() -> None:
    with pytest.raises(ValueError, match="turn 0: the 'stream' deltas must join to 'text'"):
        ScriptedProvider([{"text": "abc", "stream": ["a", "b"]}])


def test_rules_mode_first_matching_rule_wins() -> None:
    provider = ScriptedProvider(
        {
            "mode": "rules",
            "turns": [
                {"when": {"tool_result_contains": "ERROR"}, "text": "The tool failed."},
                {"when": {"last_message_role": "tool"}, "text": "Done."},
                {
                    "when": {"last_user_contains": "weather"},
                    "tool_calls": [{"name": "forecast", "arguments": {"city": "Oslo"}}],
                },
                {"when": {"any": True}, "text": "I can only talk about the weather."},
            ],
        }
    )
    ask = [{"role": "user", "content": "What's the weather in Oslo?"}]

    assert provider.complete(ask).tool_calls == (
        ToolCallRequest(id="call_2_0", name="forecast", arguments='{"city": "Oslo"}'),
    )
    ok_result = [*ask, {"role": "tool", "tool_call_id": "call_2_0", "content": "sunny"}]
    assert provider.complete(ok_result).text == "Done."
    failed = [*ask, {"role": "tool", "tool_call_id": "call_2_0", "content": "ERROR: down"}]
    assert provider.complete(failed).text == "The tool failed."
    assert provider.complete([{"role": "user", "content": "hi"}]).text == (
        "I can only talk about the weather."
    )
    # Rules do not consume turns: the same question gets the same answer again.
    assert provider.complete(ask).tool_calls[0].name == "forecast"


def test_rules_mode_without_a_match_raises() -> None:
    provider = ScriptedProvider(
        {"mode": "rules", "turns": [{"when": {"last_user_contains": "x"}, "text": "x"}]}
    )

    with pytest.raises(ScriptExhausted) as caught:
        provider.complete([{"role": "user", "content": "y"}])

    assert str(caught.value) == (
        "scripted provider <inline>: no rule matches the conversation "
        "(last message role 'user', 1 message(s))"
    )


def test_rules_mode_requires_when_on_every_turn() -> None:
    with pytest.raises(ValueError, match="turn 0: rules mode needs 'when'"):
        ScriptedProvider({"mode": "rules", "turns": [{"text": "no rule"}]})


def test_json_file_fixture(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps({"mode": "sequence", "turns": [{"text": "from a file"}, {"text": "again"}]})
    )

    provider = ScriptedProvider.from_file(path)

    assert provider.complete(USER).text == "from a file"
    assert provider.complete(USER).text == "again"
    with pytest.raises(ScriptExhausted, match=str(path)):
        provider.complete(USER)


def test_fixture_path_through_make_provider(tmp_path: Path) -> None:
    path = tmp_path / "turns.json"
    path.write_text(json.dumps([{"text": "listed"}]))

    provider = make_provider("scripted", fixture=str(path), model="fake-2")

    assert isinstance(provider, ScriptedProvider)
    turn = provider.complete(USER)
    assert (turn.text, turn.model, turn.provider) == ("listed", "fake-2", "scripted")


def test_invalid_json_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("[{")
    with pytest.raises(ValueError, match="is not valid JSON"):
        ScriptedProvider(path)


def test_sequence_is_thread_safe() -> None:
    count = 200
    provider = ScriptedProvider([{"text": str(i)} for i in range(count)])
    seen: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(count // 8):
            text = provider.complete(USER).text
            with lock:
                seen.append(str(text))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sorted(seen, key=int) == [str(i) for i in range(count)]


def test_the_caller_editing_its_list_does_not_change_the_script() -> None:
    turns = [{"text": "original"}]
    provider = ScriptedProvider(turns)
    turns[0]["text"] = "edited"
    assert provider.complete(USER).text == "original"


def test_split_deltas_round_trips() -> None:
    for text in ["", "one", " lead", "a  b\n\nc ", "tabs\tand\tspaces "]:
        assert "".join(split_deltas(text)) == text


def test_registry_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown provider kind") as caught:
        create_provider("nope")
    assert str(caught.value) == (
        f"unknown provider kind 'nope'; known kinds: {', '.join(registered_kinds())}"
    )
    assert {"openai", "scripted"} <= set(registered_kinds())


def test_register_a_custom_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    # The registry is process-wide: the kind is gone again after this test.
    monkeypatch.setattr(base, "_registry", dict(base._registry))

    class Echo(Provider):
        kind = "echo-test"

        def __init__(self, model: str = "echo") -> None:
            self.model = model

        def complete(self, messages, tools=None, *, on_delta=None) -> ModelTurn:
            return ModelTurn(
                text=str(messages[-1]["content"]),
                tool_calls=(),
                usage=Usage(),
                model=self.model,
                provider=self.kind,
                finish_reason="stop",
            )

    register_provider("echo-test", Echo)

    provider = make_provider("echo-test", model="e1")

    assert provider.complete(USER).text == "Please read notes.txt"
    assert repr(provider) == "<Echo kind='echo-test' model='e1'>"


def test_usage_add_and_as_dict() -> None:
    assert Usage(1, 2, 3) + Usage(10, 20, 30) == Usage(11, 22, 33)
    assert Usage(1, 2, 3).as_dict() == {
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "total_tokens": 3,
    }
