"""The run page's typed timeline: run events in words, and a waterfall of spans. Pure Python.

Events are stored as ``(type, step, data)``; :func:`describe` says each in a sentence an
operator reads (the raw JSON stays one click away on the page). :func:`waterfall` turns the
events of a run and of its branch runs (one *lane* each) into spans:

* ``step``: a step's work, from the moment its worker had the run (``run.claimed``, or the
  previous step's end) to its ``step.completed`` / ``router.decided``; with its attempt;
* ``failed``: an attempt that ended in ``step.retry_scheduled``, ``run.failed`` or
  ``lease.expired`` (a worker lost);
* ``retry``: a durable timer, from ``step.retry_scheduled`` to the next claim (the wake-up
  time it asked for in its label);
* ``interrupt``: a wait for a person, ``run.waiting`` to ``interrupt.resolved`` /
  ``interrupt.expired`` (the decision in its label);
* ``branches``: a fan-out's wait for its branch runs, ``branches.started`` to
  ``branches.joined``.

A span still going when the page was read ends at ``now`` and is ``open``. The events carry no
"step started" moment: a step's start is when its run was claimed or its previous step ended,
which is what the worker spent on it (a claim's own bookkeeping included).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: Width of the waterfall's bar area (SVG user units) and its label column.
BAR_WIDTH = 760.0
LABEL_WIDTH = 280.0
ROW_HEIGHT = 22
#: A span shorter than this many units is still drawn this wide (an instant step is visible).
MIN_BAR = 3.0

SPAN_KINDS = ("step", "failed", "retry", "interrupt", "branches")
#: What each kind of span is called next to its bar (colour is never the only signal).
SPAN_MARKS = {
    "step": "",
    "failed": "✕ ",
    "retry": "↻ wait ",
    "interrupt": "‖ ",
    "branches": "⇉ ",
}


@dataclass(frozen=True)
class TimelineEvent:
    """One run event as the timeline reads it; ``lane`` names the run it belongs to."""

    lane: str
    seq: int
    type: str
    step: str
    data: Mapping[str, Any]
    at: datetime


@dataclass
class Span:
    lane: str
    kind: str
    label: str
    start: datetime
    end: datetime
    step: str = ""
    attempt: int | None = None
    open: bool = False
    seq: int = 0
    # Geometry, set by waterfall().
    row: int = 0
    x: float = 0.0
    width: float = 0.0

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def duration(self) -> str:
        return duration_text(self.seconds) + (" so far" if self.open else "")

    @property
    def mark(self) -> str:
        return SPAN_MARKS.get(self.kind, "")

    @property
    def y(self) -> int:
        return self.row * ROW_HEIGHT

    @property
    def text_y(self) -> int:
        return self.y + ROW_HEIGHT - 7

    @property
    def bar_x(self) -> float:
        return round(LABEL_WIDTH + self.x, 1)

    @property
    def after_x(self) -> float:
        """Where the duration text goes: right of the bar (left of it near the end)."""
        return round(LABEL_WIDTH + self.x + self.width + 4, 1)

    @property
    def duration_place(self) -> str:
        """Where the duration text fits: ``after`` the bar, ``inside`` a long bar that reaches
        the right edge, or ``before`` a short one there (never over the label column)."""
        if self.x + self.width <= BAR_WIDTH - 90:
            return "after"
        if self.width >= 90 or self.x < 90:
            return "inside"
        return "before"

    @property
    def inside_x(self) -> float:
        return round(LABEL_WIDTH + self.x + 4, 1)


@dataclass
class Waterfall:
    spans: list[Span] = field(default_factory=list)
    lanes: list[str] = field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None

    @property
    def height(self) -> int:
        return max(1, len(self.spans)) * ROW_HEIGHT + 4

    @property
    def width(self) -> float:
        return LABEL_WIDTH + BAR_WIDTH + 8

    @property
    def total(self) -> str:
        if self.start is None or self.end is None:
            return ""
        return duration_text((self.end - self.start).total_seconds())

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys(SPAN_KINDS, 0)
        for span in self.spans:
            found[span.kind] += 1
        return found


def duration_text(seconds: float) -> str:
    """``"350 ms"``, ``"4.2 s"``, ``"3 min 5 s"``, ``"2 h 4 min"``."""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _lane_spans(events: Sequence[TimelineEvent], *, now: datetime, running: bool) -> list[Span]:
    """The spans of one run's events (in seq order); ``running``: the run is executing a step
    now (its last claim has not ended in a step yet)."""
    spans: list[Span] = []
    cursor: datetime | None = None  # since when the run's worker works on the next step
    attempt: int | None = None
    opened: dict[str, Span] = {}  # waits still going: "interrupt", "retry", "branches"

    def close(kind: str, at: datetime, suffix: str = "") -> None:
        span = opened.pop(kind, None)
        if span is not None:
            span.end = max(at, span.start)
            span.open = False
            span.label += suffix

    for event in events:
        data = event.data or {}
        kind = event.type
        if kind == "run.claimed":
            close("retry", event.at)
            cursor = event.at
            attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else attempt
        elif kind in ("step.completed", "router.decided"):
            start = cursor if cursor is not None else event.at
            step_attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else attempt
            label = event.step
            if kind == "router.decided":
                label += " → " + _choice(data.get("choice"))
            spans.append(
                Span(
                    event.lane,
                    "step",
                    label,
                    start,
                    event.at,
                    event.step,
                    step_attempt,
                    seq=event.seq,
                )
            )
            cursor = event.at
        elif kind in ("step.retry_scheduled", "run.failed", "lease.expired"):
            start = cursor if cursor is not None else event.at
            error = str(data.get("type") or data.get("message") or kind)
            step = event.step or "(worker)"
            step_attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else attempt
            spans.append(
                Span(
                    event.lane,
                    "failed",
                    f"{step}: {error}",
                    start,
                    event.at,
                    event.step,
                    step_attempt,
                    seq=event.seq,
                )
            )
            cursor = None
            if kind == "step.retry_scheduled":
                wake = _parse_time(data.get("wake_at"))
                label = f"{step}: until {wake.strftime('%H:%M:%S')}" if wake else step
                span = Span(
                    event.lane, "retry", label, event.at, now, event.step, open=True, seq=event.seq
                )
                spans.append(span)
                opened["retry"] = span
        elif kind == "run.waiting" and data.get("interrupt"):
            if cursor is not None:  # the step's work up to its question
                spans.append(
                    Span(
                        event.lane,
                        "step",
                        f"{event.step}: asks",
                        cursor,
                        event.at,
                        event.step,
                        attempt,
                        seq=event.seq,
                    )
                )
            title = str(data.get("title") or data.get("kind") or "a decision")
            span = Span(
                event.lane,
                "interrupt",
                f"{event.step}: {title}",
                event.at,
                now,
                event.step,
                open=True,
                seq=event.seq,
            )
            spans.append(span)
            opened["interrupt"] = span
            cursor = None
        elif kind == "interrupt.resolved":
            close("interrupt", event.at, f" — {data.get('decision', 'decided')}")
        elif kind == "interrupt.expired":
            close("interrupt", event.at, " — expired")
        elif kind == "branches.started":
            names = ", ".join(str(b) for b in data.get("branches") or [])
            span = Span(
                event.lane,
                "branches",
                f"{event.step}: {names}",
                event.at,
                now,
                event.step,
                open=True,
                seq=event.seq,
            )
            spans.append(span)
            opened["branches"] = span
            cursor = None
        elif kind == "branches.joined":
            close("branches", event.at)
        elif kind in ("run.succeeded", "run.cancelled", "run.timed_out", "lease.released"):
            for name in list(opened):
                close(name, event.at, " — " + kind.split(".", 1)[1].replace("_", " "))
            cursor = None
    if running and cursor is not None:
        spans.append(
            Span(
                events[-1].lane,
                "step",
                "running…",
                cursor,
                now,
                open=True,
                attempt=attempt,
                seq=events[-1].seq + 1,
            )
        )
    return spans


def _choice(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def waterfall(
    lanes: Iterable[tuple[str, Sequence[TimelineEvent], bool]], *, now: datetime
) -> Waterfall:
    """The spans of each lane ``(name, events in seq order, running now)``, ordered by lane
    (the run first, as given) and start, each with its row and bar geometry on one time axis."""
    result = Waterfall()
    for name, events, running in lanes:
        result.lanes.append(name)
        if events:
            result.spans.extend(_lane_spans(events, now=now, running=running))
    if not result.spans:
        return result
    start = min(s.start for s in result.spans)
    end = max(s.end for s in result.spans)
    result.start, result.end = start, end
    total = max((end - start).total_seconds(), 1e-6)
    order = {name: index for index, name in enumerate(result.lanes)}
    result.spans.sort(key=lambda s: (order.get(s.lane, 0), s.start, s.seq))
    for row, span in enumerate(result.spans):
        span.row = row
        span.x = round((span.start - start).total_seconds() / total * BAR_WIDTH, 1)
        width = span.seconds / total * BAR_WIDTH
        span.width = round(min(max(width, MIN_BAR), BAR_WIDTH - span.x + MIN_BAR), 1)
    return result


# --- Events in words -----------------------------------------------------------------------------


def _text(value: Any, limit: int = 120) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(event_type: str, data: Mapping[str, Any] | None) -> str:
    """One event in a sentence (an unknown type: its data's keys)."""
    d = dict(data or {})
    if event_type == "run.created":
        return f"created for workflow {d.get('workflow', '?')}"
    if event_type == "run.claimed":
        return (
            f"claimed by worker {d.get('worker', '?')} "
            f"(attempt {d.get('attempt', '?')}, fencing token {d.get('token', '?')})"
        )
    if event_type == "step.completed":
        nxt = ", ".join(str(n) for n in d.get("next") or []) or "the end"
        chunks = d.get("chunks")
        wrote = f", wrote {chunks} chunk{'s' if chunks != 1 else ''}" if chunks else ""
        return (
            f"completed (attempt {d.get('attempt', '?')}, "
            f"checkpoint {d.get('checkpoint', '?')}{wrote}); next: {nxt}"
        )
    if event_type == "router.decided":
        how = "fan-out to" if d.get("fanout") else "chose"
        return f"router {how} {_choice(d.get('choice'))}"
    if event_type == "step.retry_scheduled":
        error = d.get("type") or "error"
        message = f": {_text(d['message'])}" if d.get("message") else ""
        return (
            f"attempt {d.get('attempt', '?')} failed ({error}{message}); "
            f"attempt {d.get('next_attempt', '?')} at {d.get('wake_at', '?')}"
        )
    if event_type == "run.waiting":
        if d.get("interrupt"):
            return (
                f"waiting for a person: {d.get('kind', 'interrupt')} “{_text(d.get('title', ''))}”"
            )
        return "waiting for its branches"
    if event_type == "interrupt.resolved":
        return f"{d.get('decision', 'decided')} by {d.get('by') or '?'}"
    if event_type == "interrupt.expired":
        return "the interrupt expired" + (
            f" (default: {_text(d['default'])})" if d.get("default") is not None else ""
        )
    if event_type == "branches.started":
        names = ", ".join(str(b) for b in d.get("branches") or [])
        return f"started branches {names} (join at {d.get('join', '?')})"
    if event_type == "branches.joined":
        return f"{len(d.get('children') or [])} branches joined"
    if event_type == "session.switched":
        return f"session switched (forked at {d.get('length', '?')} chunks)"
    if event_type == "effect.resolved":
        return f"effect {d.get('key', '')} resolved: {d.get('outcome', '?')}".replace("  ", " ")
    if event_type in ("run.failed", "run.timed_out"):
        error = d.get("type") or d.get("code") or d.get("reason") or "error"
        message = f": {_text(d['message'])}" if d.get("message") else ""
        return f"{event_type.split('.')[1].replace('_', ' ')}: {error}{message}"
    if event_type == "run.succeeded":
        return "succeeded" + (f" (checkpoint {d['checkpoint']})" if d.get("checkpoint") else "")
    if event_type == "run.cancelled":
        return "cancelled" + (f": {_text(d['reason'])}" if d.get("reason") else "")
    if event_type == "run.needs_review":
        return "needs review" + (
            f": {_text(d.get('reason') or d.get('effect') or '')}" if d else ""
        )
    if event_type == "run.resumed":
        return (
            "resumed"
            + (f" by {d['by']}" if d.get("by") else "")
            + (f": {_text(d['reason'])}" if d.get("reason") else "")
        )
    if event_type == "lease.expired":
        return "the worker's lease expired (worker lost); the run is claimable again"
    if event_type == "lease.released":
        return "the worker let the run go"
    return ", ".join(f"{k}: {_text(v, 60)}" for k, v in d.items())


def event_group(event_type: str) -> str:
    """The CSS group of an event type: ``ok``, ``wait``, ``bad``, ``info``."""
    if event_type in ("step.completed", "router.decided", "run.succeeded", "branches.joined"):
        return "ok"
    if event_type in (
        "run.waiting",
        "branches.started",
        "step.retry_scheduled",
        "run.needs_review",
    ):
        return "wait"
    if event_type in (
        "run.failed",
        "run.timed_out",
        "lease.expired",
        "run.cancelled",
        "interrupt.expired",
    ):
        return "bad"
    return "info"
