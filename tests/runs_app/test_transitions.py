"""The lifecycle tables (run, interrupt, effect), checked for every pair of statuses (no
database)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import pytest

from openrath_project.errors import Conflict, IllegalTransition
from runs_app.transitions import (
    ACTIVE,
    EFFECT,
    INTERRUPT,
    RUN,
    STATUSES,
    TERMINAL,
    TRANSITIONS,
    UNSET,
    Changes,
    RunStatus,
    StateMachine,
    Unset,
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


# --- Interrupts and effects: the same kind of table, written out independently ---------------

INTERRUPT_ALLOWED = {("pending", "resolved"), ("pending", "expired")}
INTERRUPT_ALL = ["pending", "resolved", "expired"]

EFFECT_ALLOWED = {
    ("prepared", "started"),
    ("started", "prepared"),  # an idempotent effect found started after a crash: called again
    ("started", "succeeded"),
    ("started", "failed"),
    ("started", "needs_review"),
    ("failed", "started"),
    ("needs_review", "resolved"),
    ("resolved", "started"),  # not_applied: called once more
}
EFFECT_ALL = ["prepared", "started", "succeeded", "failed", "needs_review", "resolved"]

MACHINES = [
    pytest.param(RUN, ALL, ALLOWED, {"queued"}, id="run"),
    pytest.param(INTERRUPT, INTERRUPT_ALL, INTERRUPT_ALLOWED, {"pending"}, id="interrupt"),
    pytest.param(EFFECT, EFFECT_ALL, EFFECT_ALLOWED, {"prepared", "succeeded"}, id="effect"),
]


@pytest.mark.parametrize(("machine", "statuses", "allowed", "initial"), MACHINES)
def test_each_machine_is_exactly_its_table(machine, statuses, allowed, initial):
    assert list(machine.statuses) == statuses
    assert list(machine.transitions) == statuses
    table = {(s, t) for s, targets in machine.transitions.items() for t in targets}
    assert table == allowed
    assert machine.initial == frozenset(initial)
    assert machine.terminal == frozenset(s for s in statuses if not any(a == s for a, _ in allowed))
    for source, target in itertools.product(statuses, statuses):
        ok = (source, target) in allowed
        assert machine.can(source, target) is ok
        if ok:
            machine.check(source, target)
            continue
        with pytest.raises(IllegalTransition) as excinfo:
            machine.check(source, target)
        assert str(excinfo.value) == (
            f"illegal {machine.entity} transition from '{source}' to '{target}'"
        )
        assert excinfo.value.details == {"from": source, "to": target}
        assert excinfo.value.code == "illegal_transition"
    for target in statuses:
        assert machine.sources(target) == frozenset(s for s, t in allowed if t == target)


def test_terminal_sets_of_interrupts_and_effects():
    assert frozenset({"resolved", "expired"}) == INTERRUPT.terminal
    assert frozenset({"succeeded"}) == EFFECT.terminal
    assert INTERRUPT.is_terminal("expired")
    assert not INTERRUPT.is_terminal("pending")
    assert EFFECT.sources("resolved") == frozenset({"needs_review"})
    # born there; re-entered only by an idempotent effect found started after a crash
    assert EFFECT.sources("prepared") == frozenset({"started"})


def test_the_run_functions_are_the_run_machine():
    assert RUN.entity == "run"
    assert (RUN.statuses, RUN.transitions, RUN.terminal) == (STATUSES, TRANSITIONS, TERMINAL)
    for source, target in PAIRS:
        assert can_transition(source, target) is RUN.can(source, target)
        assert is_terminal(source) is RUN.is_terminal(source)


def test_unknown_interrupt_or_effect_status_names_the_entity():
    with pytest.raises(ValueError, match="^unknown interrupt status 'approved'; expected one of: "):
        INTERRUPT.can("pending", "approved")
    with pytest.raises(ValueError, match="^unknown effect status 'done'; expected one of: "):
        EFFECT.check("done", "started")


def test_a_table_that_misses_a_status_or_names_an_unknown_one_is_refused():
    with pytest.raises(ValueError, match="must list every status exactly once"):
        StateMachine(
            entity="lamp",
            statuses=("off", "on"),
            initial=frozenset({"off"}),
            transitions={"off": frozenset({"on"})},
        )
    with pytest.raises(ValueError, match="moves to unknown statuses"):
        StateMachine(
            entity="lamp",
            statuses=("off", "on"),
            initial=frozenset({"off"}),
            transitions={"off": frozenset({"broken"}), "on": frozenset()},
        )
    with pytest.raises(ValueError, match="born in unknown statuses"):
        StateMachine(
            entity="lamp",
            statuses=("off", "on"),
            initial=frozenset({"dim"}),
            transitions={"off": frozenset({"on"}), "on": frozenset({"off"})},
        )


@dataclass(frozen=True)
class _LampChanges(Changes):
    watts: int | Unset = UNSET
    label: str | None | Unset = UNSET


def test_typed_changes_name_only_the_fields_set():
    assert _LampChanges().columns() == {}
    assert _LampChanges(watts=40).columns() == {"watts": 40}
    # None is a value (clear the column), UNSET is "leave it alone".
    assert _LampChanges(label=None).columns() == {"label": None}
    assert repr(UNSET) == "UNSET"
    with pytest.raises(TypeError):
        _LampChanges(colour="red")  # type: ignore[call-arg]
