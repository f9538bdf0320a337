"""A step is handed new containers around the stored state's own strings and numbers
(runs_app/state_track.py), and what it returns is judged exactly as a check of the whole state
would judge it: whatever it mutated in place, at any depth, with values Python calls equal and
JSON does not (1, 1.0, true; 0.0, -0.0), over a chain of steps."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runs_app.state_delta import StateInvalid, check_json_state
from runs_app.state_track import StateTrack
from tests.runs_app.test_state_delta import KEYS, PROPERTY, STATES, VALUES, assert_exactly, twin

TENANT = "00000000-0000-0000-0000-000000000001"
TEXT = st.text(max_size=6)
#: Flat messages, mostly of text (the case checked at C speed), some with numbers of twin types.
MESSAGE_VALUES = TEXT | st.none() | st.sampled_from([0, 1, 0.0, -0.0, 1.0, True, False])
MESSAGES = st.lists(
    st.dictionaries(st.sampled_from(["role", "content", "name"]), MESSAGE_VALUES, max_size=3),
    max_size=8,
)


class Text(str):
    """A string that is not exactly ``str``: equal to its text, stored as that text."""


def containers(value: Any) -> list[Any]:
    """Every container in ``value`` (``value`` first)."""
    found: list[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            stack.extend(item)
    return found


def mutate(data: st.DataObject, state: dict[str, Any]) -> None:
    """Random in-place edits anywhere in ``state``: the containers the step was handed."""
    for _ in range(data.draw(st.integers(0, 4))):
        target = data.draw(st.sampled_from(containers(state)))
        if isinstance(target, dict):
            op = data.draw(st.sampled_from(["set", "twin", "text", "delete", "pop"]))
            if op == "set" or not target:
                target[data.draw(KEYS)] = data.draw(VALUES)
                continue
            key = data.draw(st.sampled_from(sorted(target)))
            if op == "twin":
                target[key] = twin(target[key])
            elif op == "text":
                old = target[key]
                target[key] = Text(old) if isinstance(old, str) else data.draw(TEXT)
            elif op == "delete":
                del target[key]
            else:
                target.pop(key)
        else:
            op = data.draw(st.sampled_from(["append", "insert", "twin", "remove", "reverse"]))
            if op == "append" or not target:
                target.append(data.draw(VALUES))
                continue
            at = data.draw(st.integers(0, len(target) - 1))
            if op == "insert":
                target.insert(at, data.draw(VALUES))
            elif op == "twin":
                target[at] = twin(target[at])
            elif op == "remove":
                del target[at]
            else:
                target.reverse()


def returned(data: st.DataObject, working: dict[str, Any]) -> Any:
    """What the step returns: the state it mutated, or a new one built around its lists."""
    if data.draw(st.booleans()):
        return working
    built = dict(working)
    for key, value in working.items():
        if isinstance(value, list) and data.draw(st.booleans()):
            built[key] = value + [data.draw(VALUES | MESSAGES.map(lambda m: m[0] if m else {}))]
    return built


@PROPERTY
@given(initial=STATES, messages=MESSAGES, data=st.data())
def test_every_step_is_judged_as_a_check_of_its_whole_state(initial, messages, data):
    try:
        state = check_json_state({**initial, "messages": messages})
    except StateInvalid:
        return
    track = StateTrack(TENANT, state)
    expected = state
    for _ in range(data.draw(st.integers(1, 4))):
        working = track.working_copy()
        assert_exactly(working, expected)
        # Nothing the step may change is shared with what the track keeps.
        kept = {id(c) for c in containers(track._hydrated())}
        assert not kept & {id(c) for c in containers(working)}
        mutate(data, working)
        result = returned(data, working)
        try:
            whole = check_json_state(copy.deepcopy(result))
        except StateInvalid:
            with pytest.raises(StateInvalid):
                track.change(result, where="the state")
            return
        change = track.change(result, where="the state")
        assert_exactly(change.snapshot, whole)
        track.advance(change, committed=True)
        # What the step still holds is its own: changing it later changes nothing kept.
        mutate(data, working)
        expected = whole
    assert_exactly(track.working_copy(), expected)


def test_values_equal_in_python_but_not_in_json_are_changes():
    track = StateTrack(TENANT, check_json_state({"m": [{"n": 1, "f": 0.0, "b": True}] * 3}))
    for key, value in (("n", 1.0), ("f", -0.0), ("b", 1)):
        working = track.working_copy()
        working["m"][1][key] = value  # in place, in a message the step was handed
        change = track.change(working, where="the state")
        assert type(change.snapshot["m"][1][key]) is type(value)
        assert repr(change.snapshot["m"][1][key]) == repr(value)
        track.advance(change, committed=True)


def test_a_message_of_text_changed_in_place_is_a_change():
    messages = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    track = StateTrack(TENANT, check_json_state({"messages": messages}))
    working = track.working_copy()
    working["messages"][7]["content"] = "edited"
    working["messages"] = working["messages"] + [{"role": "assistant", "content": "new"}]
    change = track.change(working, where="the state")
    assert change.snapshot["messages"][7]["content"] == "edited"
    assert len(change.snapshot["messages"]) == 51
    track.advance(change, committed=True)
    again = track.working_copy()
    assert again["messages"][7]["content"] == "edited"
    again["messages"][3]["role"] = None
    del again["messages"][4]["content"]
    change = track.change(again, where="the state")
    assert change.snapshot["messages"][3] == {"role": None, "content": "m3"}
    assert change.snapshot["messages"][4] == {"role": "user"}


def test_a_non_json_value_equal_to_a_text_is_refused():
    class Anything:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    track = StateTrack(TENANT, check_json_state({"messages": [{"content": "a"}]}))
    working = track.working_copy()
    working["messages"][0]["content"] = Anything()
    with pytest.raises(StateInvalid):
        track.change(working, where="the state")


def test_numbers_swapped_between_keys_in_another_order_are_a_change():
    # {"x": 1, "y": true} and {"y": 1, "x": true} are equal in Python and their values have the
    # same types in iteration order: only the keys' order tells them apart.
    track = StateTrack(TENANT, check_json_state({"m": [{"x": 1, "y": True}, {"x": 2, "y": 3}]}))
    working = track.working_copy()
    first = working["m"][0]
    working["m"][0] = {"y": first["x"], "x": first["y"]}
    change = track.change(working, where="the state")
    assert repr(change.snapshot["m"][0]["x"]) == "True"
    assert repr(change.snapshot["m"][0]["y"]) == "1"
