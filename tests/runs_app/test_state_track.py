"""A step costs what it changed (runs_app/state_track.py): only the changed values are checked,
with the same answers as a check of the whole state; a long list is stored in blocks written
once however often it grows; a step that is not checkpointed is in the next checkpoint."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from openrath_project import large_values
from runs_app import services
from runs_app.models import Checkpoint
from runs_app.state_delta import StateInvalid, apply, check_json_change, check_json_state
from runs_app.state_track import StateTrack
from tests.runs_app.conftest import drive
from tests.runs_app.test_state_delta import PROPERTY, STATES, assert_exactly, edit_dict


@PROPERTY
@given(old=STATES, data=st.data())
def test_checking_the_change_gives_what_checking_the_whole_state_gives(old, data):
    try:
        old = check_json_state(old)
    except StateInvalid:
        assume(False)
    new = edit_dict(data, copy.deepcopy(old))
    try:
        whole = check_json_state(new)
    except StateInvalid:
        with pytest.raises(StateInvalid):  # what the edit brought in is refused
            check_json_change(old, new)
        return
    assert_exactly(apply(old, check_json_change(old, new)), whole)


def _refusal(check) -> str:
    with pytest.raises(StateInvalid) as caught:
        check()
    return str(caught.value)


@pytest.mark.parametrize(
    "bad",
    [
        "nul \x00 inside",
        "lone \udfff surrogate",
        2**63,
        math.inf,
        {"$artifact": {"digest": "0" * 64}},
        {"ok": [1, {"k\x00": 2}]},
    ],
    ids=["nul", "surrogate", "int64", "infinite", "reserved", "key"],
)
@pytest.mark.parametrize("where", ["top", "set in a nested object", "appended", "inserted"])
def test_a_bad_new_value_is_refused_as_in_the_whole_state(bad, where):
    old = check_json_state({"a": {"b": [1, 2, 3]}, "n": 1})
    new = copy.deepcopy(old)
    if where == "top":
        new["n"] = bad
    elif where == "set in a nested object":
        new["a"]["c"] = bad
    elif where == "appended":
        new["a"]["b"].append(bad)
    else:
        new["a"]["b"].insert(1, bad)
    whole = _refusal(lambda: check_json_state(new, where="the state"))
    changed = _refusal(lambda: check_json_change(old, new, where="the state"))
    assert changed == whole


def test_depth_and_json_types_are_checked_in_the_change():
    old = check_json_state({"a": {"b": []}})
    deep: object = 1
    for _ in range(70):
        deep = [deep]
    for new in ({"a": {"b": [deep]}}, {"a": {"b": [object()]}}, {"a": {"b": [], "s": {1, 2}}}):
        with pytest.raises(StateInvalid):
            check_json_change(old, new)
    # Nested as deep as a stored value may be (64 containers, the state itself one of them).
    fits: object = 1
    for _ in range(61):
        fits = [fits]
    assert check_json_change(old, {"a": {"b": [fits]}})


@pytest.fixture
def artifacts_dir(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "artifacts")},
        },
    }
    settings.OPENRATH_STATE_INLINE_BYTES = 2048
    return tmp_path / "artifacts"


def _stored_bytes(directory) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


@pytest.mark.django_db
def test_a_long_list_grown_step_by_step_writes_each_item_once(project, artifacts_dir):
    message = {"role": "user", "content": "x" * 90}
    track = StateTrack(project.tenant_id, {"messages": []})
    for step in range(200):
        state = track.working_copy()
        state["messages"] = state["messages"] + [{**message, "n": step}]
        change = track.change(state, where="the state")
        track.advance(change, committed=True)
    everything = json.dumps([{**message, "n": n} for n in range(200)]).encode()
    ref = track.stored["messages"]["$artifact"]
    assert len(ref["blocks"]) >= 5
    assert len(json.dumps(ref["tail"])) < 2048 + 200
    # Every item is in one block or in the tail; no block was written twice or rewritten.
    assert sum(block["items"] for block in ref["blocks"]) + len(ref["tail"]) == 200
    assert _stored_bytes(artifacts_dir) < len(everything)
    # The same list stored at once is cut into the same blocks.
    at_once = large_values.offload(project.tenant_id, {"messages": change.snapshot["messages"]})
    assert at_once["messages"] == track.stored["messages"]
    # And it reads back whole, in order, as the next step gets it.
    assert track.working_copy()["messages"] == [{**message, "n": n} for n in range(200)]
    assert StateTrack(project.tenant_id, track.stored).working_copy() == change.snapshot


@pytest.mark.django_db
def test_a_list_ref_changed_in_the_middle_is_cut_again(project, artifacts_dir):
    items = [{"n": n, "text": "y" * 90} for n in range(100)]
    track = StateTrack(project.tenant_id, large_values.offload(project.tenant_id, {"l": items}))
    state = track.working_copy()
    state["l"][3]["text"] = "changed"
    del state["l"][50:60]
    change = track.change(state, where="the state")
    assert StateTrack(project.tenant_id, change.stored).working_copy() == state
    first_block = track.stored["l"]["$artifact"]["blocks"][0]
    assert change.stored["l"]["$artifact"]["blocks"][0] != first_block
    # Shrunk below the limit: inline again.
    state = StateTrack(project.tenant_id, change.stored).working_copy()
    state["l"] = state["l"][:2]
    assert StateTrack(project.tenant_id, change.stored).change(state, where="s").stored == state


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("size", [10, 300], ids=["inline", "in blocks"])
def test_every_checkpoint_rebuilds_also_after_a_step_without_one(
    registry, project, settings, tmp_path, size
):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "artifacts")},
        },
    }
    settings.OPENRATH_STATE_INLINE_BYTES = 1024
    run, _ = services.run_create(
        project=project,
        workflow=registry.get("growing_list"),
        state={"items": [], "size": size, "per_step": 3},
    )
    done = drive(registry, run.id)
    assert done.status == "succeeded", done.error
    steps = ["first", "quiet", "third", "fourth"]
    expected = {1: steps[:1], 2: steps[:3], 3: steps[:4]}  # "quiet" has no checkpoint
    seqs = list(Checkpoint.objects.filter(run=done).order_by("seq").values_list("seq", "full"))
    assert [seq for seq, _ in seqs] == [1, 2, 3]
    for seq, _full in seqs:
        state = large_values.hydrate(project.tenant_id, services.run_state_at(done, seq))
        assert [item["step"] for item in state["items"]] == [
            step for step in expected[seq] for _ in range(3)
        ], seq
        assert all(item["text"] == "m" * size for item in state["items"])
