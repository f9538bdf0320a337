"""State deltas (runs_app/state_delta.py): exact round trips for random states and edits, the
old format still applying, list changes costing what changed, and a run whose messages live in
its state rebuilt checkpoint by checkpoint from the database."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openrath_project import flow
from openrath_project.jsontext import canonical
from runs_app import services
from runs_app.models import Checkpoint
from runs_app.selectors import checkpoint_page
from runs_app.state_delta import DeltaMismatch, apply, apply_list, diff, diff_list
from tests.runs_app.conftest import drive

# Bounded so the file runs in seconds on a loaded machine; the edits are drawn to hit every
# kind of change, so 150 examples a property cover the format well.
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SCALARS = (
    st.none()
    | st.booleans()
    | INT64
    | st.sampled_from([0, 1, -1, 0.0, -0.0, 1.0, -1.0, True, False])  # the type twins
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
KEYS = st.text(min_size=0, max_size=4)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)
STATES = st.dictionaries(KEYS, VALUES, max_size=6)


def shape(value: Any) -> Any:
    """The value with every scalar replaced by its type's name: equal shapes and equal
    canonical text mean the same JSON, down to 1 / 1.0 / true."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


def twin(value: Any) -> Any:
    """A value equal to ``value`` in Python but not in JSON (or ``value`` itself if none)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return float(value) if abs(value) < 2**53 else value
    if isinstance(value, float):
        if value == 0.0:
            return -value
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    return value


def edit_list(data: st.DataObject, items: list[Any]) -> list[Any]:
    """Random edits of a list: appends, inserts, removals, replacements, nested changes."""
    items = list(items)
    for _ in range(data.draw(st.integers(0, 3))):
        op = data.draw(st.sampled_from(["append", "insert", "remove", "replace", "twin", "nested"]))
        if op == "append" or not items:
            items += data.draw(st.lists(VALUES, min_size=1, max_size=3))
            continue
        at = data.draw(st.integers(0, len(items) - 1))
        if op == "insert":
            items[at:at] = data.draw(st.lists(VALUES, min_size=1, max_size=3))
        elif op == "remove":
            del items[at : at + data.draw(st.integers(1, 3))]
        elif op == "replace":
            items[at] = data.draw(VALUES)
        elif op == "twin":
            items[at] = twin(items[at])
        else:
            items[at] = edit_value(data, items[at])
    return items


def edit_dict(data: st.DataObject, mapping: dict[str, Any]) -> dict[str, Any]:
    """Random edits of an object: keys added, deleted, replaced, twinned or changed inside."""
    mapping = dict(mapping)
    for _ in range(data.draw(st.integers(0, 3))):
        op = data.draw(st.sampled_from(["add", "delete", "replace", "twin", "nested"]))
        if op == "add" or not mapping:
            mapping[data.draw(KEYS)] = data.draw(VALUES)
            continue
        key = data.draw(st.sampled_from(sorted(mapping)))
        if op == "delete":
            del mapping[key]
        elif op == "replace":
            mapping[key] = data.draw(VALUES)
        elif op == "twin":
            mapping[key] = twin(mapping[key])
        else:
            mapping[key] = edit_value(data, mapping[key])
    return mapping


def edit_value(data: st.DataObject, value: Any) -> Any:
    if isinstance(value, list):
        return edit_list(data, value)
    if isinstance(value, dict):
        return edit_dict(data, value)
    return twin(value) if data.draw(st.booleans()) else data.draw(VALUES)


def stored(delta: dict[str, Any]) -> dict[str, Any]:
    """The delta as it comes back from a JSON column."""
    loaded: dict[str, Any] = json.loads(json.dumps(delta, allow_nan=False))
    return loaded


def assert_exactly(actual: Any, expected: Any) -> None:
    assert canonical(actual) == canonical(expected)
    assert shape(actual) == shape(expected)


@PROPERTY
@given(old=STATES, data=st.data())
def test_apply_of_diff_gives_the_new_state_exactly(old, data):
    new = edit_dict(data, copy.deepcopy(old))
    before = canonical(old)
    delta = diff(old, new)
    assert_exactly(apply(old, stored(delta)), new)
    assert canonical(old) == before, "neither diff nor apply may change the old state"
    if canonical(old) == canonical(new) and shape(old) == shape(new):
        assert delta == {}


@PROPERTY
@given(old=st.lists(VALUES, max_size=8), data=st.data())
def test_list_deltas_round_trip(old, data):
    new = edit_list(data, copy.deepcopy(old))
    delta = diff_list(old, new)
    assert_exactly(apply_list(old, stored(delta)), new)


@PROPERTY
@given(old=STATES, new=STATES)
def test_unrelated_states_round_trip(old, new):
    assert_exactly(apply(old, stored(diff(old, new))), new)


@PROPERTY
@given(old=STATES, data=st.data())
def test_deltas_in_the_old_format_still_apply(old, data):
    """What was stored before list deltas existed: keys set, deleted and objects changed in
    place, built here by hand as the old ``diff`` wrote them."""
    new = dict(old)
    sets = data.draw(st.dictionaries(KEYS, VALUES, max_size=3))
    removed = sorted(data.draw(st.sets(st.sampled_from(sorted(old)))) if old else [])
    for key in removed:
        new.pop(key)
    new.update(sets)
    delta: dict[str, Any] = {}
    if sets:
        delta["set"] = sets
    if removed:
        delta["del"] = [key for key in removed if key not in sets]
    objects = sorted(key for key, value in new.items() if isinstance(value, dict))
    if objects:
        key = data.draw(st.sampled_from(objects))
        inner = data.draw(st.dictionaries(KEYS, VALUES, min_size=1, max_size=3))
        delta["sub"] = {key: {"set": inner}}
        new[key] = {**new[key], **inner}
    assert_exactly(apply(old, stored(delta)), new)


def test_an_old_format_nested_delta_on_a_non_object_starts_from_empty():
    assert apply({"a": [1, 2]}, {"sub": {"a": {"set": {"b": 1}}}}) == {"a": {"b": 1}}
    assert apply({}, {"sub": {"a": {"set": {"b": 1}}}}) == {"a": {"b": 1}}


@settings(max_examples=40, deadline=None)
@given(
    item=st.dictionaries(st.sampled_from(["role", "content", "n"]), SCALARS, min_size=1),
    appended=st.integers(1, 4),
)
def test_an_append_costs_the_same_whatever_the_length(item, appended):
    added = [{**item, "new": j} for j in range(appended)]
    deltas = []
    for length in (100, 300, 900):  # "turn" has three digits throughout
        messages = [{**item, "i": i} for i in range(length)]
        old = {"messages": messages, "turn": length}
        new = {"messages": messages + added, "turn": length + 1}
        delta = diff(old, new)
        assert delta == {"set": {"turn": length + 1}, "list": {"messages": {"append": added}}}
        deltas.append(len(canonical(delta)))
    assert len(set(deltas)) == 1


def test_each_list_change_is_encoded_where_it_happened():
    base = [{"id": i, "role": "assistant", "text": f"text {i}"} for i in range(100)]
    appended = [*base, {"id": 100}]
    assert diff_list(base, appended) == {"append": [{"id": 100}]}
    inserted = [*base[:40], "note", *base[40:]]
    assert diff_list(base, inserted) == {"splice": [40, 0, ["note"]]}
    removed = base[:10] + base[13:]
    assert diff_list(base, removed) == {"splice": [10, 3, []]}
    changed = copy.deepcopy(base)
    changed[70]["text"] = "edited"
    assert diff_list(base, changed) == {"sub": {"70": {"set": {"text": "edited"}}}}
    changed_and_appended = [*changed, {"id": 100}]
    assert diff_list(base, changed_and_appended) == {
        "sub": {"70": {"set": {"text": "edited"}}},
        "append": [{"id": 100}],
    }
    nested = [list(range(20)), "x"]
    grown = [list(range(21)), "x"]
    assert diff_list(nested, grown) == {"list": {"0": {"append": [20]}}}
    assert diff_list(base, list(base)) == {}


def test_a_change_of_type_alone_is_a_change():
    # Python says 1 == 1.0 == True and 0.0 == -0.0; JSON (and the state's digest) does not.
    for old, new in [(1, 1.0), (1, True), (0.0, -0.0), (1.0, True)]:
        pairs: list[tuple[dict[str, Any], dict[str, Any]]] = [
            ({"v": old}, {"v": new}),
            ({"v": {"w": old}}, {"v": {"w": new}}),
            ({"v": [old, "a"]}, {"v": [new, "a"]}),
        ]
        for before, after in pairs:
            delta = diff(before, after)
            assert delta != {}
            assert_exactly(apply(before, stored(delta)), after)


def test_a_small_change_to_a_small_value_sets_the_value():
    """A nested delta is used only when it is shorter than the new value itself."""
    assert diff({"steps": ["one"]}, {"steps": ["one", "two"]}) == {"set": {"steps": ["one", "two"]}}
    assert diff({"a": {"b": 1}}, {"a": {"b": 2}}) == {"set": {"a": {"b": 2}}}


@pytest.mark.parametrize(
    ("old", "delta"),
    [
        ({"a": 1}, {"list": {"a": {"append": [1]}}}),
        ({"a": [1]}, {"list": {"a": {"set": {"1": 2}}}}),
        ({"a": [1]}, {"list": {"a": {"set": {"-1": 2}}}}),
        ({"a": [1]}, {"list": {"a": {"sub": {"0": {"set": {"b": 1}}}}}}),
        ({"a": [1]}, {"list": {"a": {"list": {"0": {"append": [1]}}}}}),
        ({"a": [1, 2]}, {"list": {"a": {"splice": [1, 2, []]}}}),
        ({"a": [1, 2]}, {"list": {"a": {"splice": [3, 0, [5]]}}}),
    ],
)
def test_a_delta_that_does_not_fit_is_refused(old, delta):
    with pytest.raises(DeltaMismatch):
        apply(old, delta)


# --- a run keeping its messages in its state, through the database --------------------------

TURNS = 24
#: The turns where turn() does more than append: n % k == r.
APPENDS_ONLY = ((5, 3), (7, 4), (6, 5))


def turn(state: dict[str, Any]) -> dict[str, Any]:
    """One turn of the chat below: mostly an append, sometimes an edit elsewhere in the list."""
    n = state["turns"] + 1
    messages = list(state["messages"])
    messages.append({"role": "assistant" if n % 2 else "user", "content": f"message {n} " * 12})
    if n % 5 == 3:
        messages[1] = {**messages[1], "seen": n}
    if n % 7 == 4:
        del messages[0]
    if n % 6 == 5:
        messages.insert(1, {"role": "system", "content": f"note {n}"})
    # An int, then the same number as a float: equal in Python, not in the state's JSON.
    return {**state, "turns": n, "messages": messages, "score": n // 2 if n % 2 else n / 2}


class Chat(flow.Workflow):
    name = "state-delta-chat"

    @flow.step(entry=True, successors=("more",), effects="none")
    def talk(self, state, ctx):
        return turn(state)

    @flow.router(successors=("talk", "stop"))
    def more(self, state):
        return "talk" if state["turns"] < TURNS else "stop"

    @flow.step(effects="none")
    def stop(self, state, ctx):
        return {**state, "done": True}


@pytest.mark.django_db(transaction=True)
def test_a_run_with_messages_in_its_state_rebuilds_every_checkpoint(registry, project):
    registry.register(Chat)
    initial: dict[str, Any] = {"turns": 0, "messages": [{"role": "user", "content": "hello"}]}
    run, _ = services.run_create(project=project, workflow=registry.get(Chat.name), state=initial)
    done = drive(registry, run.id)
    assert done.status == "succeeded"

    checkpoints = list(Checkpoint.objects.filter(run=done).order_by("seq"))
    assert len(checkpoints) == 2 * TURNS + 1  # talk and more per turn, stop
    # Stored whole more than once (keyframes by delta bytes): rebuilds cross keyframes.
    assert sum(c.full for c in checkpoints) >= 2
    expected: dict[str, Any] = initial
    states: dict[int, dict[str, Any]] = {}
    for checkpoint in checkpoints:
        if checkpoint.step == "talk":
            expected = turn(expected)
        elif checkpoint.step == "stop":
            expected = {**expected, "done": True}
        states[checkpoint.seq] = expected
        assert_exactly(services.run_state_at(done, checkpoint.seq), expected)
    assert_exactly(done.output, states[len(checkpoints)])
    for row in checkpoint_page(done, limit=len(checkpoints)):
        assert_exactly(row["state"], states[row["checkpoint"].seq])

    # A turn that only appended is stored as the appended message plus the counters, however
    # long the list has grown; a router's checkpoint changes nothing.
    appends = whole = 0
    for checkpoint in checkpoints:
        state = states[checkpoint.seq]
        append_only = checkpoint.step == "talk" and all(
            state["turns"] % k != r for k, r in APPENDS_ONLY
        )
        if checkpoint.full:
            assert_exactly(checkpoint.state, state)
            whole += append_only
        elif checkpoint.step == "more":
            assert checkpoint.state == {}
        elif append_only:
            appends += 1
            assert checkpoint.state == {
                "set": {"turns": state["turns"], "score": state["score"]},
                "list": {"messages": {"append": [state["messages"][-1]]}},
            }
    assert appends + whole == 15  # the turns that only append: a delta unless a keyframe
    assert appends >= 12
