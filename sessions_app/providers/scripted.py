"""The ``scripted`` provider: deterministic, offline model turns read from a fixture.

It is the model-free path of the quickstart, the examples and the tests. A fixture is a list of
turns, a ``{"mode": ..., "turns": [...]}`` object, or the path of a JSON file holding either.

A turn::

    {
      "text": "I'll look." | null,
      "tool_calls": [{"id": "call_1", "name": "read_file", "arguments": {"path": "a.txt"}}],
      "usage": {"prompt_tokens": 12, "completion_tokens": 3},
      "stream": ["I'll ", "look."],
      "when": {"last_user_contains": "file"}
    }

* ``text`` (default null) and ``tool_calls`` (default ``[]``). A call's ``arguments`` may be an
  object (serialised to JSON) or a string (passed through verbatim, so a fixture can reproduce a
  model producing broken JSON). A missing ``id`` becomes ``call_<turn>_<i>`` (turn index in the
  fixture, call index in the turn): stable across runs.
* ``usage`` (optional): missing counts are estimated: prompt = characters of all messages // 4
  (at least 1), completion = ``len(text) // 4 + 5 * len(tool_calls)`` (at least 1).
* ``stream`` (optional): the exact text deltas to emit when the caller streams; they must join
  to ``text``. By default the text is split into word-sized deltas (each word with its trailing
  whitespace).
* ``finish_reason`` (optional): default ``"tool_calls"`` when the turn has tool calls, else
  ``"stop"``.
* ``when`` (rules mode only), one of: ``{"last_user_contains": str}`` (the last user message
  contains the string), ``{"last_message_role": "tool"}`` (the last message has that role),
  ``{"tool_result_contains": str}`` (the last message is a tool result containing the string),
  ``{"any": true}`` (always).

Modes: ``"sequence"`` (default) hands out the turns in order, one per ``complete`` call, with a
per-instance thread-safe counter; ``"rules"`` picks the first turn whose ``when`` matches the
messages, every call. Running out (or no rule matching) raises :class:`ScriptExhausted`.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessions_app.providers.base import (
    DeltaCallback,
    ModelTurn,
    Provider,
    ScriptExhausted,
    ToolCallRequest,
    Usage,
)

KIND = "scripted"
DEFAULT_MODEL = "scripted-1"
MODES = ("sequence", "rules")
_RULE_KEYS = frozenset({"last_user_contains", "last_message_role", "tool_result_contains", "any"})
_TURN_KEYS = frozenset({"text", "tool_calls", "usage", "stream", "when", "finish_reason"})
_WORDISH = re.compile(r"\S+\s*|\s+")

Fixture = Sequence[Mapping[str, Any]] | Mapping[str, Any] | str | os.PathLike[str]


@dataclass(frozen=True)
class ScriptedTurn:
    """One validated fixture turn."""

    index: int
    text: str | None
    tool_calls: tuple[ToolCallRequest, ...]
    usage: Mapping[str, int] | None
    stream: tuple[str, ...] | None
    when: Mapping[str, Any] | None
    finish_reason: str | None


def _content_text(content: Any) -> str:
    """Text of a message's content: a string, or the text parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return json.dumps(content, sort_keys=True, default=str)


def _message_chars(message: Mapping[str, Any]) -> int:
    size = len(_content_text(message.get("content")))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        size += len(str(function.get("name", ""))) + len(str(function.get("arguments", "")))
    return size


def split_deltas(text: str) -> list[str]:
    """Word-sized deltas that join back to ``text`` exactly."""
    return _WORDISH.findall(text)


def _parse_turn(index: int, raw: Any, *, mode: str) -> ScriptedTurn:
    where = f"turn {index}"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a turn must be an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _TURN_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {', '.join(unknown)}")
    text = raw.get("text")
    if text is not None and not isinstance(text, str):
        raise ValueError(f"{where}: 'text' must be a string or null")

    calls: list[ToolCallRequest] = []
    raw_calls = raw.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise ValueError(f"{where}: 'tool_calls' must be a list")
    for position, call in enumerate(raw_calls):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ValueError(f"{where}: tool call {position} needs a string 'name'")
        arguments = call.get("arguments", {})
        arguments_text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call_id = call.get("id") or f"call_{index}_{position}"
        calls.append(ToolCallRequest(id=str(call_id), name=call["name"], arguments=arguments_text))

    usage = raw.get("usage")
    if usage is not None and (
        not isinstance(usage, Mapping)
        or not all(isinstance(value, int) and value >= 0 for value in usage.values())
    ):
        raise ValueError(f"{where}: 'usage' must map token kinds to non-negative integers")

    stream = raw.get("stream")
    if stream is not None:
        if not isinstance(stream, list) or not all(isinstance(part, str) for part in stream):
            raise ValueError(f"{where}: 'stream' must be a list of strings")
        if "".join(stream) != (text or ""):
            raise ValueError(f"{where}: the 'stream' deltas must join to 'text'")

    when = raw.get("when")
    if mode == "rules":
        if not isinstance(when, Mapping) or len(when) != 1 or not set(when) <= _RULE_KEYS:
            raise ValueError(
                f"{where}: rules mode needs 'when' with exactly one of "
                f"{', '.join(sorted(_RULE_KEYS))}"
            )
    elif when is not None:
        raise ValueError(f"{where}: 'when' is only meaningful in rules mode")

    finish_reason = raw.get("finish_reason")
    if finish_reason is not None and not isinstance(finish_reason, str):
        raise ValueError(f"{where}: 'finish_reason' must be a string")
    return ScriptedTurn(
        index=index,
        text=text,
        tool_calls=tuple(calls),
        usage=dict(usage) if usage is not None else None,
        stream=tuple(stream) if stream is not None else None,
        when=dict(when) if when is not None else None,
        finish_reason=finish_reason,
    )


def _rule_matches(rule: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> bool:
    last = messages[-1] if messages else None
    if "any" in rule:
        return bool(rule["any"])
    if "last_message_role" in rule:
        return last is not None and last.get("role") == rule["last_message_role"]
    if "tool_result_contains" in rule:
        return (
            last is not None
            and last.get("role") == "tool"
            and str(rule["tool_result_contains"]) in _content_text(last.get("content"))
        )
    if "last_user_contains" in rule:
        for message in reversed(messages):
            if message.get("role") == "user":
                return str(rule["last_user_contains"]) in _content_text(message.get("content"))
        return False
    return False


class ScriptedProvider(Provider):
    """Plays back a fixture of model turns; see the module docstring for the format."""

    kind = KIND

    def __init__(
        self,
        fixture: Fixture | None = None,
        *,
        mode: str | None = None,
        model: str = DEFAULT_MODEL,
        turns: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        if fixture is not None and turns is not None:
            raise ValueError("pass either fixture= or turns=, not both")
        source: Any = turns if turns is not None else fixture
        if source is None:
            raise ValueError("the scripted provider needs a fixture (a list of turns or a path)")
        self.source = str(source) if isinstance(source, str | os.PathLike) else "<inline>"
        if isinstance(source, str | os.PathLike):
            source = _load_json(Path(source))
        if isinstance(source, Mapping):
            unknown = sorted(set(source) - {"mode", "turns", "model"})
            if unknown:
                raise ValueError(f"scripted fixture: unknown keys {', '.join(unknown)}")
            mode = mode or source.get("mode")
            if model == DEFAULT_MODEL and isinstance(source.get("model"), str):
                model = source["model"]
            source = source.get("turns")
        if not isinstance(source, list | tuple):
            raise ValueError("scripted fixture: 'turns' must be a list")
        self.mode = mode or "sequence"
        if self.mode not in MODES:
            raise ValueError(f"scripted fixture: mode must be one of {', '.join(MODES)}")
        self.model = model
        # Copy so later edits to the caller's list cannot change a running script.
        self.turns: tuple[ScriptedTurn, ...] = tuple(
            _parse_turn(index, copy.deepcopy(raw), mode=self.mode)
            for index, raw in enumerate(source)
        )
        self._next = 0
        self._lock = threading.Lock()

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, model: str = DEFAULT_MODEL
    ) -> ScriptedProvider:
        """Load a fixture from a JSON file (a list of turns or ``{"mode", "turns"}``)."""
        return cls(Path(path), model=model)

    def __repr__(self) -> str:
        return (
            f"<ScriptedProvider model={self.model!r} mode={self.mode!r} "
            f"turns={len(self.turns)} source={self.source!r}>"
        )

    @property
    def position(self) -> int:
        """How many turns sequence mode has handed out."""
        with self._lock:
            return self._next

    def reset(self) -> None:
        """Start the sequence again from the first turn."""
        with self._lock:
            self._next = 0

    def _pick(self, messages: Sequence[Mapping[str, Any]]) -> ScriptedTurn:
        if self.mode == "sequence":
            with self._lock:
                if self._next >= len(self.turns):
                    raise ScriptExhausted(
                        f"scripted provider {self.source}: all {len(self.turns)} turn(s) used; "
                        f"call {self._next + 1} has no turn left"
                    )
                turn = self.turns[self._next]
                self._next += 1
            return turn
        for turn in self.turns:
            if turn.when is not None and _rule_matches(turn.when, messages):
                return turn
        last_role = messages[-1].get("role") if messages else None
        raise ScriptExhausted(
            f"scripted provider {self.source}: no rule matches the conversation "
            f"(last message role {last_role!r}, {len(messages)} message(s))"
        )

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelTurn:
        turn = self._pick(messages)
        if on_delta is not None and turn.text:
            for delta in turn.stream if turn.stream is not None else split_deltas(turn.text):
                if delta:
                    on_delta(delta)
        return ModelTurn(
            text=turn.text,
            tool_calls=turn.tool_calls,
            usage=self._usage(turn, messages),
            model=self.model,
            provider=self.kind,
            finish_reason=turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop"),
        )

    @staticmethod
    def _usage(turn: ScriptedTurn, messages: Sequence[Mapping[str, Any]]) -> Usage:
        given = turn.usage or {}
        prompt = given.get("prompt_tokens")
        if prompt is None:
            prompt = max(1, sum(_message_chars(message) for message in messages) // 4)
        completion = given.get("completion_tokens")
        if completion is None:
            completion = max(1, len(turn.text or "") // 4 + 5 * len(turn.tool_calls))
        total = given.get("total_tokens", prompt + completion)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.expanduser().read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read scripted fixture {path}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"scripted fixture {path} is not valid JSON: {exc}") from exc
