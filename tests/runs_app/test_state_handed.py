"""A step is handed the same message objects step after step (runs_app/state_track.py), so that
carrying a long list on costs what the step changed: no message is copied or compared when the
step only appends; a message changed through its methods is seen, one changed after its step
is not the state's; the stored form's canonical text, kept by what changed, is the text a whole
encoding gives, and so is each checkpoint's digest."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from openrath_project import large_values
from openrath_project.jsontext import canonical
from runs_app import state_delta
from runs_app.state_delta import TrackedDict, check_json_state
from runs_app.state_track import StateTrack
from tests.runs_app.test_state_delta import assert_exactly
from tests.runs_app.test_state_track import artifacts_dir  # noqa: F401 - a fixture

TENANT = "00000000-0000-0000-0000-000000000001"


def _messages(count: int) -> list[dict]:
    return [{"role": "user", "content": f"message {n}"} for n in range(count)]


def test_appending_to_a_long_list_copies_and_compares_no_message(monkeypatch):
    track = StateTrack(TENANT, check_json_state({"messages": _messages(500), "n": 0}))
    first = track.working_copy()
    assert all(type(m) is TrackedDict for m in first["messages"])
    compared = []
    for name in ("_same", "_flat_members"):
        original = getattr(state_delta, name)

        def counting(*args, _original=original, _name=name):
            if isinstance(args[0], dict | list):  # a message or a list of them, not "n"
                compared.append(_name)
            return _original(*args)

        monkeypatch.setattr(state_delta, name, counting)
    for step in range(3):
        working = track.working_copy()
        # The very objects of the step before: nothing was copied for this step.
        assert all(map(lambda a, b: a is b, working["messages"], first["messages"]))
        working["messages"] = working["messages"] + [{"role": "assistant", "content": str(step)}]
        working["n"] += 1
        change = track.change(working, where="the state")
        track.advance(change, committed=True)
    assert compared == []
    assert len(track.working_copy()["messages"]) == 503
    assert track.working_copy()["messages"][-1] == {"role": "assistant", "content": "2"}


def test_a_message_changed_through_each_method_is_a_change():
    edits = {
        "setitem": lambda m: m.__setitem__("content", "new"),
        "delitem": lambda m: m.__delitem__("content"),
        "update": lambda m: m.update(content="new"),
        "ior": lambda m: m.__ior__({"content": "new"}),
        "pop": lambda m: m.pop("content"),
        "popitem": lambda m: m.popitem(),
        "setdefault": lambda m: m.setdefault("extra", "new"),
        "clear": lambda m: m.clear(),
    }
    for edit in edits.values():
        track = StateTrack(TENANT, check_json_state({"messages": _messages(5)}))
        working = track.working_copy()
        working["messages"].append({"role": "assistant", "content": "appended"})
        edit(working["messages"][2])
        expected = check_json_state(copy.deepcopy(working))
        change = track.change(working, where="the state")
        assert_exactly(change.snapshot, expected)
        track.advance(change, committed=True)
        assert_exactly(track.working_copy(), expected)


def test_a_message_kept_and_changed_after_its_step_is_not_the_state():
    track = StateTrack(TENANT, check_json_state({"messages": _messages(4)}))
    working = track.working_copy()
    kept = working["messages"][1]
    working["messages"] = working["messages"] + [{"role": "assistant", "content": "a"}]
    track.advance(track.change(working, where="the state"), committed=True)
    kept["content"] = "changed later"  # between steps, by code that kept the object
    again = track.working_copy()
    assert again["messages"][1] == {"role": "user", "content": "message 1"}
    assert again["messages"][1] is not kept
    change = track.change(again, where="the state")
    assert change.snapshot["messages"][1]["content"] == "message 1"
    # Changed during its own step, then kept: let go, changing it later changes nothing.
    track.advance(change, committed=True)
    working = track.working_copy()
    edited = working["messages"][0]
    edited["content"] = "edited in its step"
    track.advance(track.change(working, where="the state"), committed=True)
    edited["content"] = "and again after"
    assert track.working_copy()["messages"][0]["content"] == "edited in its step"


def test_a_message_moved_or_reused_elsewhere_is_stored_as_json():
    track = StateTrack(TENANT, check_json_state({"messages": _messages(6)}))
    working = track.working_copy()
    messages = working["messages"]
    working["last"] = messages[-1]
    working["messages"] = [messages[5], *messages[1:5], messages[0], messages[2]]
    expected = check_json_state(copy.deepcopy(working))
    change = track.change(working, where="the state")
    assert_exactly(change.snapshot, expected)
    assert all(type(m) is dict for m in change.snapshot["messages"])
    assert type(change.snapshot["last"]) is dict


def test_a_handed_message_copies_pickles_and_encodes_as_a_plain_dict():
    track = StateTrack(TENANT, check_json_state({"messages": _messages(2)}))
    message = track.working_copy()["messages"][0]
    assert isinstance(message, dict)
    assert message == {"role": "user", "content": "message 0"}
    pickled = pickle.loads(pickle.dumps(message))  # noqa: S301 - our own bytes
    for made in (copy.copy(message), copy.deepcopy(message), pickled):
        assert type(made) is dict
        assert made == message
    assert json.loads(json.dumps(message)) == message
    assert canonical(message) == canonical(dict(message))
    # One made by code that copies "like its type" is a working dict that notes nothing.
    made_alike = type(message)(message)
    made_alike["content"] = "changed"
    assert type(message).fromkeys(["a"], 1) == {"a": 1}
    assert message["content"] == "message 0"


def test_lists_of_other_values_are_handed_fresh_copies_of_what_is_not_flat():
    state = check_json_state({"items": ["text", 1, None, {"flat": True}, {"nested": [1, 2]}]})
    track = StateTrack(TENANT, state)
    first = track.working_copy()["items"]
    second = track.working_copy()["items"]
    assert first[3] is second[3]  # flat: the same object, noting its changes
    assert first[4] is not second[4]
    assert first[4]["nested"] is not second[4]["nested"]
    second[4]["nested"].append(3)
    change = track.change({"items": second}, where="the state")
    assert change.snapshot["items"][4] == {"nested": [1, 2, 3]}


OPS = st.lists(
    st.sampled_from(["append", "append", "append", "edit", "replace", "other", "drop"]),
    min_size=1,
    max_size=40,
)


@pytest.fixture
def small_inline(artifacts_dir, settings):  # noqa: F811 - the fixture imported above
    settings.OPENRATH_STATE_INLINE_BYTES = 600


@pytest.mark.django_db
@hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, size=st.integers(10, 200))
def test_the_kept_text_and_tail_sizes_are_what_encoding_the_whole_gives(
    small_inline, project, ops, size
):
    track = StateTrack(project.tenant_id, {"messages": [], "other": 0})
    assert track.stored_text() == canonical(track.stored)
    for n, op in enumerate(ops):
        working = track.working_copy()
        messages = working["messages"]
        if op == "append":
            working["messages"] = messages + [{"role": "user", "content": "x" * size, "n": n}]
        elif op == "edit" and messages:
            messages[n % len(messages)]["content"] = "edited"
        elif op == "replace":
            working["messages"] = messages[: len(messages) // 2]
        elif op == "other":
            working["other"] = n
        elif op == "drop" and messages:
            del messages[0]
        change = track.change(working, where="the state")
        assert change.text() == canonical(change.stored)
        for key, (tail, measured) in change.tails.items():
            ref = change.stored[key]
            if large_values.is_ref(ref) and ref["$artifact"]["tail"] is tail:
                assert measured == large_values._items_size(tail)
        track.advance(change, committed=True)
        assert track.stored_text() == canonical(track.stored)
    rebuilt = StateTrack(project.tenant_id, track.stored).working_copy()
    assert rebuilt == track.working_copy()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("count", [5, 400], ids=["inline", "in blocks"])
def test_messages_changed_in_place_reach_every_checkpoint(registry, project, small_inline, count):
    from runs_app import services
    from runs_app.models import Checkpoint
    from tests.runs_app.conftest import drive

    run, _ = services.run_create(
        project=project,
        workflow=registry.get("editing_list"),
        state={"messages": [], "count": count},
    )
    done = drive(registry, run.id)
    assert done.status == "succeeded", done.error
    messages = large_values.hydrate(project.tenant_id, done.output)["messages"]
    assert messages[0]["content"] == "changed through the kept object"
    assert messages[1]["content"] == "edited in place"
    assert [m["content"] for m in messages[2:4]] == ["m3", "m4"]  # "m2" was removed
    assert messages[-2:] == [
        {"role": "assistant", "content": "after the edit"},
        {"role": "user", "content": "kept"},
    ]
    assert len(messages) == count + 1
    # Every checkpoint rebuilds, its digest checked (run_state_at refuses a mismatch).
    for seq in Checkpoint.objects.filter(run=done).values_list("seq", flat=True):
        services.run_state_at(done, seq)
