"""The run lifecycle table, checked for every pair of statuses (no database)."""

from __future__ import annotations

import itertools
import re

import pytest

from openrath_project.errors import Conflict, IllegalTransition
from runs_app.transitions import (
    ACTIVE,
    STATUSES,
    TERMINAL,
    TRANSITIONS,
    RunStatus,
    can_transition,
    check_transition,
    is_terminal,
)

# Written out independently of the module: DESIGN section 5 plus what OpenRath 2.0 allows.
ALLOWED = {
    ("queued", "running"),
    ("queued", "cancelled"),
    ("queued", "timed_out"),
    ("queued", "failed"),
    ("running", "queued"),
    ("running", "waiting"),
    ("running", "needs_review"),
    ("running", "succeeded"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("running", "timed_out"),
    ("waiting", "queued"),
    ("waiting", "cancelled"),
    ("waiting", "timed_out"),
    ("waiting", "failed"),
    ("needs_review", "queued"),
    ("needs_review", "failed"),
    ("needs_review", "cancelled"),
}
ALL = [
    "queued",
    "running",
    "waiting",
    "needs_review",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
]
PAIRS = list(itertools.product(ALL, ALL))


def test_statuses():
    assert list(STATUSES) == ALL
    assert [status.value for status in RunStatus] == ALL
    assert frozenset({"succeeded", "failed", "cancelled", "timed_out"}) == TERMINAL
    assert frozenset({"queued", "running", "waiting", "needs_review"}) == ACTIVE


def test_table_is_exactly_the_allowed_pairs():
    assert list(TRANSITIONS) == ALL
    table = {(source, target) for source, targets in TRANSITIONS.items() for target in targets}
    assert table == ALLOWED
    for targets in TRANSITIONS.values():
        assert all(type(target) is str for target in targets)
    with pytest.raises(TypeError):
        TRANSITIONS["succeeded"] = frozenset({"queued"})  # type: ignore[index]


@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_every_pair(source, target):
    allowed = (source, target) in ALLOWED
    assert can_transition(source, target) is allowed
    assert can_transition(RunStatus(source), RunStatus(target)) is allowed
    if allowed:
        check_transition(source, target)
        return
    with pytest.raises(IllegalTransition) as excinfo:
        check_transition(RunStatus(source), target)
    error = excinfo.value
    assert str(error) == f"illegal run transition from '{source}' to '{target}'"
    assert error.details == {"from": source, "to": target}
    assert isinstance(error, Conflict)
    assert error.status_code == 409
    assert error.code == "illegal_transition"


@pytest.mark.parametrize("status", ALL)
def test_terminal_statuses_have_no_way_out(status):
    assert is_terminal(status) is (status in {"succeeded", "failed", "cancelled", "timed_out"})
    assert (TRANSITIONS[status] == frozenset()) is is_terminal(status)


def test_unknown_statuses_are_a_programming_error():
    expected = (
        "unknown run status 'paused'; expected one of: queued, running, waiting, needs_review, "
        "succeeded, failed, cancelled, timed_out"
    )
    for call in (
        lambda: can_transition("paused", "queued"),
        lambda: can_transition("queued", "paused"),
        lambda: check_transition("paused", "queued"),
        lambda: is_terminal("paused"),
    ):
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            call()
