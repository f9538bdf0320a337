"""openrath_project.jsondiff: a readable JSON difference with RFC 6901 paths."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from openrath_project.jsondiff import json_diff, pointer

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4)
    ),
    max_leaves=20,
)


def _resolve(value, path: str):
    if path == "":
        return value
    for raw in path[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def test_equal_values_have_no_difference() -> None:
    state = {"messages": [{"role": "user", "content": "hi"}], "n": 1}
    assert json_diff(state, copy.deepcopy(state)) == []


def test_an_append_is_one_add_at_its_index() -> None:
    old = {"messages": ["a", "b"]}
    new = {"messages": ["a", "b", "c"]}
    assert json_diff(old, new) == [{"op": "add", "path": "/messages/2", "new": "c"}]


def test_changes_name_their_path_and_both_sides() -> None:
    old = {"a": {"x": 1}, "gone": True, "l": [1, 2, 3]}
    new = {"a": {"x": 2}, "l": [1], "new/key": "v"}
    assert json_diff(old, new) == [
        {"op": "replace", "path": "/a/x", "old": 1, "new": 2},
        {"op": "remove", "path": "/gone", "old": True},
        {"op": "remove", "path": "/l/1", "old": 2},
        {"op": "remove", "path": "/l/2", "old": 3},
        {"op": "add", "path": "/new~1key", "new": "v"},
    ]


def test_json_types_stay_apart() -> None:
    assert json_diff({"v": 1}, {"v": 1.0}) == [
        {"op": "replace", "path": "/v", "old": 1, "new": 1.0}
    ]
    assert json_diff([1], [True]) == [{"op": "replace", "path": "/0", "old": 1, "new": True}]
    assert json_diff({"v": []}, {"v": {}}) == [
        {"op": "replace", "path": "/v", "old": [], "new": {}}
    ]


def test_the_list_is_capped() -> None:
    assert len(json_diff(list(range(100)), list(range(1, 101)), limit=7)) == 7


def test_pointer_escapes() -> None:
    assert pointer(["a/b", "c~d", 3]) == "/a~1b/c~0d/3"
    assert pointer([]) == ""


@given(json_values, json_values)
def test_every_change_names_real_values_on_each_side(old, new) -> None:
    changes = json_diff(old, new)
    assert (changes == []) == (repr(old) == repr(new) or _deep_same(old, new))
    for change in changes:
        if change["op"] != "add":
            assert _deep_same(_resolve(old, change["path"]), change["old"])
        if change["op"] != "remove":
            assert _deep_same(_resolve(new, change["path"]), change["new"])


def _deep_same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_deep_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b
