"""The run page's waterfall and event sentences (``console/timeline.py``), without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from openrath_project.console import timeline
from openrath_project.console.timeline import TimelineEvent

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ev(lane: str, seq: int, second: float, type_: str, step: str = "", **data) -> TimelineEvent:
    return TimelineEvent(lane, seq, type_, step, data, at(second))


def test_steps_retries_waits_and_branches_become_spans():
    run = [
        ev("run", 1, 0, "run.created"),
        ev("run", 2, 1, "run.claimed", attempt=1),
        ev("run", 3, 3, "run.waiting", "ask", interrupt="i1", kind="approval", title="Ship?"),
        ev("run", 4, 63, "interrupt.resolved", "ask", decision="approve", by="alice"),
        ev("run", 5, 64, "run.claimed", attempt=1),
        ev("run", 6, 65, "step.completed", "ask", attempt=1),
        ev(
            "run",
            7,
            66,
            "step.retry_scheduled",
            "send",
            type="Timeout",
            attempt=1,
            next_attempt=2,
            wake_at=at(76).isoformat(),
        ),
        ev("run", 8, 76.5, "run.claimed", attempt=2),
        ev("run", 9, 77, "step.completed", "send", attempt=2),
        ev("run", 10, 77, "router.decided", "split", choice=["a", "b"], fanout=True),
        ev("run", 11, 77, "branches.started", "split", branches=["a", "b"], join="join"),
        ev("run", 12, 90, "branches.joined", "join"),
        ev("run", 13, 90, "run.claimed", attempt=2),
        ev("run", 14, 91, "step.completed", "join", attempt=2),
        ev("run", 15, 91, "run.succeeded", checkpoint=5),
    ]
    branch = [
        ev("branch a", 1, 78, "run.claimed", attempt=1),
        ev("branch a", 2, 88, "step.completed", "a", attempt=1),
        ev("branch a", 3, 88, "run.succeeded"),
    ]
    result = timeline.waterfall([("run", run, False), ("branch a", branch, False)], now=at(200))
    rows = [(s.lane, s.kind, s.label, s.seconds, s.attempt, s.open) for s in result.spans]
    assert rows == [
        ("run", "step", "ask: asks", 2.0, 1, False),
        ("run", "interrupt", "ask: Ship? — approve", 60.0, None, False),
        ("run", "step", "ask", 1.0, 1, False),
        ("run", "failed", "send: Timeout", 1.0, 1, False),
        ("run", "retry", "send: until 12:01:16", 10.5, None, False),
        ("run", "step", "send", 0.5, 2, False),
        ("run", "step", "split → a, b", 0.0, 2, False),
        ("run", "branches", "split: a, b", 13.0, None, False),
        ("run", "step", "join", 1.0, 2, False),
        ("branch a", "step", "a", 10.0, 1, False),
    ]
    assert (result.start, result.end, result.total) == (at(1), at(91), "1 min 30 s")
    assert result.lanes == ["run", "branch a"]
    # One time axis: the bar of a span starts where its time is; an instant is still visible.
    wait = result.spans[1]
    assert (wait.x, wait.width) == (round(2 / 90 * timeline.BAR_WIDTH, 1), round(60 / 90 * 760, 1))
    assert result.spans[6].width == timeline.MIN_BAR
    assert [s.row for s in result.spans] == list(range(10))


def test_a_span_still_going_ends_now_and_says_so():
    events = [
        ev("run", 1, 0, "run.claimed", attempt=1),
        ev("run", 2, 2, "run.waiting", "ask", interrupt="i1", title="Ship?"),
    ]
    waiting = timeline.waterfall([("run", events, False)], now=at(32))
    assert [(s.kind, s.open, s.duration) for s in waiting.spans] == [
        ("step", False, "2.0 s"),
        ("interrupt", True, "30.0 s so far"),
    ]
    running = timeline.waterfall(
        [("run", [ev("run", 1, 0, "run.claimed", attempt=3)], True)], now=at(0.25)
    )
    assert [(s.label, s.open, s.attempt, s.duration) for s in running.spans] == [
        ("running…", True, 3, "250 ms so far")
    ]
    assert timeline.waterfall([("run", [], False)], now=at(0)).spans == []


def test_events_in_words():
    describe = timeline.describe
    assert describe("run.claimed", {"worker": "w1", "attempt": 2, "token": 5}) == (
        "claimed by worker w1 (attempt 2, fencing token 5)"
    )
    assert describe(
        "step.completed", {"attempt": 1, "checkpoint": 3, "chunks": 2, "next": ["b"]}
    ) == ("completed (attempt 1, checkpoint 3, wrote 2 chunks); next: b")
    assert describe("step.completed", {"attempt": 1, "checkpoint": 4, "next": []}) == (
        "completed (attempt 1, checkpoint 4); next: the end"
    )
    assert describe("router.decided", {"choice": ["a", "b"], "fanout": True}) == (
        "router fan-out to a, b"
    )
    assert describe("run.waiting", {"interrupt": "x", "kind": "approval", "title": "Go?"}) == (
        "waiting for a person: approval “Go?”"
    )
    assert describe("run.waiting", {}) == "waiting for its branches"
    assert describe("interrupt.resolved", {"decision": "reject", "by": "bob"}) == "reject by bob"
    assert describe(
        "step.retry_scheduled",
        {"type": "Timeout", "message": "slow", "attempt": 1, "next_attempt": 2, "wake_at": "T"},
    ) == ("attempt 1 failed (Timeout: slow); attempt 2 at T")
    assert describe("run.failed", {"reason": "worker lost too many times"}) == (
        "failed: worker lost too many times"
    )
    assert describe("something.new", {"a": 1}) == "a: 1"
    assert [timeline.event_group(t) for t in ("run.succeeded", "run.waiting", "run.failed")] == [
        "ok",
        "wait",
        "bad",
    ]


def test_durations_read_as_a_person_says_them():
    assert [timeline.duration_text(s) for s in (0.0004, 0.35, 4.24, 185, 7440)] == [
        "0 ms",
        "350 ms",
        "4.2 s",
        "3 min 5 s",
        "2 h 4 min",
    ]
