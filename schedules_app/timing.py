"""When a schedule fires: cron expressions (``cronsim``), fixed intervals, time zones, catch-up.

Plain Python, no Django: every instant in and out is an aware ``datetime``; the database keeps
UTC. A cron expression is evaluated in the schedule's zone (``zoneinfo``), so ``30 2 * * *`` in
``Europe/Berlin`` means 02:30 on the wall clock there, and cronsim's rules apply to the days the
clocks change (the same as Debian's cron):

* spring forward (02:00 -> 03:00): a time inside the skipped hour fires once, at the first
  instant after the jump (02:30 fires at 03:00 local);
* fall back (03:00 -> 02:00): a daily time inside the repeated hour fires once, on its first
  occurrence (02:30 CEST, not again at 02:30 CET); an expression whose hour field matches
  every hour (``*/30 * * * *``) fires in both copies of the hour, as the real clock passes
  them.

An interval schedule ignores the zone: its ticks are ``start + k * interval`` in absolute time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from openrath_project.errors import ValidationFailed

KINDS = ("cron", "interval")
#: After downtime: fire nothing missed (only a tick within the grace), one run for all the
#: missed ticks, or each missed tick up to ``catchup_limit`` (the latest ones).
CATCHUP_POLICIES = ("skip", "once", "all")
#: While the schedule's previous run is still active: skip the tick, queue it until that run
#: ends, cancel that run and start the new one, or start it alongside.
OVERLAP_POLICIES = ("skip", "queue", "cancel_previous", "allow")

MIN_INTERVAL_SECONDS = 10
MAX_INTERVAL_SECONDS = 366 * 24 * 3600
MAX_CATCHUP_LIMIT = 100
MAX_CRON_LENGTH = 200
#: A tick is "on time" (fired under the ``skip`` catch-up policy) when the reconciler sees it
#: within this many seconds; the reconciler runs every few seconds, so only downtime (or a
#: paused worker fleet) makes a tick older than that.
DEFAULT_GRACE_SECONDS = 60
#: Most missed ticks counted one by one after a long downtime (the count stops there).
MAX_COUNTED_MISSED = 10_000


def check_timezone(name: str) -> ZoneInfo:
    """The zone named ``name`` (an IANA name such as ``Europe/Berlin``), or ValidationFailed."""
    if not name or len(name) > 64:
        raise ValidationFailed(
            "timezone must be an IANA zone name such as Europe/Berlin",
            details={"timezone": ["unknown time zone"]},
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationFailed(
            f"unknown time zone {name!r} (an IANA name such as Europe/Berlin)",
            details={"timezone": ["unknown time zone"]},
        ) from exc


def check_cron(expression: str) -> str:
    """``expression`` normalised (single spaces), or ValidationFailed naming cronsim's reason."""
    normal = " ".join(expression.split())
    if not normal or len(normal) > MAX_CRON_LENGTH:
        raise ValidationFailed(
            "cron must be a five-field cron expression, e.g. '30 2 * * *'",
            details={"cron": ["invalid cron expression"]},
        )
    if len(normal.split(" ")) != 5:
        # cronsim also reads a six-field form with seconds first: ticks finer than a minute are
        # not something a reconciler passing every few seconds can keep.
        raise ValidationFailed(
            f"invalid cron expression {normal!r}: it needs five fields "
            "(minute hour day-of-month month day-of-week)",
            details={"cron": ["invalid cron expression: it needs five fields"]},
        )
    try:
        next(CronSim(normal, datetime(2000, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration) as exc:
        reason = str(exc) or "it never matches"
        raise ValidationFailed(
            f"invalid cron expression {normal!r}: {reason}",
            details={"cron": [f"invalid cron expression: {reason}"]},
        ) from exc
    return normal


@dataclass(frozen=True)
class Timing:
    """What decides a schedule's ticks. ``start`` is the first instant a tick may fall on (an
    interval schedule's ticks are ``start + k * interval``, k >= 0)."""

    kind: str
    start: datetime
    cron: str = ""
    interval_seconds: int | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            raise ValueError("start must be an aware datetime")

    def check(self) -> Timing:
        """This timing with a normalised cron expression, or ValidationFailed naming the
        field."""
        if self.kind not in KINDS:
            raise ValidationFailed(
                f"kind must be one of {', '.join(KINDS)}", details={"kind": ["unknown kind"]}
            )
        check_timezone(self.timezone)
        if self.kind == "cron":
            if self.interval_seconds is not None:
                raise ValidationFailed(
                    "a cron schedule takes no interval_seconds",
                    details={"interval_seconds": ["not allowed with kind cron"]},
                )
            return Timing(
                kind="cron",
                start=self.start,
                cron=check_cron(self.cron),
                timezone=self.timezone,
            )
        if self.cron:
            raise ValidationFailed(
                "an interval schedule takes no cron expression",
                details={"cron": ["not allowed with kind interval"]},
            )
        seconds = self.interval_seconds
        if seconds is None or not MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS:
            raise ValidationFailed(
                f"interval_seconds must be between {MIN_INTERVAL_SECONDS} and "
                f"{MAX_INTERVAL_SECONDS}",
                details={"interval_seconds": ["out of range"]},
            )
        return self

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (and not before ``start``), in UTC."""
        if moment < self.start:
            # The start itself may be a tick: look from just before it.
            moment = self.start - timedelta(microseconds=1)
        if self.kind == "interval":
            assert self.interval_seconds is not None
            step = timedelta(seconds=self.interval_seconds)
            if moment < self.start:
                return self.start.astimezone(UTC)
            k = (moment - self.start) // step + 1
            return (self.start + k * step).astimezone(UTC)
        local = moment.astimezone(ZoneInfo(self.timezone))
        return next(CronSim(self.cron, local)).astimezone(UTC)

    def upcoming(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` ticks strictly after ``after``, in UTC."""
        ticks: list[datetime] = []
        moment = after
        for _ in range(count):
            moment = self.next_after(moment)
            ticks.append(moment)
        return ticks

    def latest_until(self, moment: datetime, *, since: datetime, count: int) -> list[datetime]:
        """Up to ``count`` ticks in ``[since, moment]``, the latest ones, oldest first."""
        if count <= 0 or moment < since:
            return []
        lowest = max(since, self.start)
        found: list[datetime] = []
        if self.kind == "interval":
            assert self.interval_seconds is not None
            step = timedelta(seconds=self.interval_seconds)
            if moment < self.start:
                return []
            k = (moment - self.start) // step
            while len(found) < count and k >= 0:
                tick = self.start + k * step
                if tick < lowest:
                    break
                found.append(tick.astimezone(UTC))
                k -= 1
            return found[::-1]
        zone = ZoneInfo(self.timezone)
        # cronsim's reverse iteration is strictly before its start: begin one second after.
        for tick in CronSim(self.cron, (moment + timedelta(seconds=1)).astimezone(zone), True):
            if tick > moment:
                continue
            if tick < lowest or len(found) >= count:
                break
            found.append(tick.astimezone(UTC))
        return found[::-1]

    def count_between(self, since: datetime, until: datetime) -> int:
        """How many ticks fall in ``[since, until]`` (counted up to MAX_COUNTED_MISSED)."""
        if until < since:
            return 0
        if self.kind == "interval":
            assert self.interval_seconds is not None
            step = timedelta(seconds=self.interval_seconds)
            first = self.next_after(since - timedelta(microseconds=1))
            if first > until:
                return 0
            return min(MAX_COUNTED_MISSED, (until - first) // step + 1)
        total = 0
        moment = since - timedelta(microseconds=1)
        while total < MAX_COUNTED_MISSED:
            moment = self.next_after(moment)
            if moment > until:
                break
            total += 1
        return total


@dataclass(frozen=True)
class Firing:
    """What one reconciler pass does with a schedule that is due: the ticks to fire (oldest
    first), how many due ticks it lets go, and the schedule's next tick after now."""

    ticks: list[datetime]
    missed: int
    next_fire_at: datetime


def plan_firing(
    timing: Timing,
    *,
    due_since: datetime,
    now: datetime,
    catchup: str,
    catchup_limit: int,
    grace_seconds: int = DEFAULT_GRACE_SECONDS,
) -> Firing:
    """The ticks a due schedule fires now. ``due_since`` is its ``next_fire_at`` (the first tick
    not yet fired or let go). Each policy fires at most the ticks in ``[due_since, now]``:

    * ``skip``: the latest tick if it is at most ``grace_seconds`` old, none otherwise;
    * ``once``: the latest tick, whatever its age (one run stands for all that were missed);
    * ``all``: the latest ``catchup_limit`` ticks, oldest first.
    """
    if catchup not in CATCHUP_POLICIES:
        raise ValueError(f"unknown catch-up policy {catchup!r}")
    wanted = catchup_limit if catchup == "all" else 1
    ticks = timing.latest_until(now, since=due_since, count=wanted)
    if catchup == "skip" and ticks and now - ticks[-1] > timedelta(seconds=grace_seconds):
        ticks = []
    due = timing.count_between(due_since, now)
    return Firing(ticks=ticks, missed=max(0, due - len(ticks)), next_fire_at=timing.next_after(now))
