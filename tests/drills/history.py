"""The history of a network fault drill and the checker that judges it afterwards.

Plain Python (no Django, no database): the drill (``tests/drills/netdrill.py``) fills a
:class:`History` from what it did (submissions, faults with their heal times), from the
database after the drill (claims and step commits in each run's event order, with their fencing
tokens, chunks, effect ledger rows, terminal statuses) and from the effect target's own record
of every request; :func:`check` returns every violation it finds and the recovery time of each
fault. Unit tests: ``tests/drills/test_history_checker.py``.

Invariants (each violation names one):

* ``not_terminal`` / ``bad_terminal``: every accepted run is ``succeeded``, or ``needs_review``
  with an effect of its own in ``needs_review`` (the documented outcome of a non-idempotent
  effect whose worker was cut off: it may or may not have happened);
* ``effect_applied_twice``: the target applied a request at most once per idempotency key (for
  ``once``, which applies every request it receives, that is at most one request per key);
  ``effect_missing``: a succeeded run's effects were applied exactly once each;
* ``stale_commit``: each step commit carries the fencing token of the latest claim before it in
  the run's event order; ``claim_order``: claim tokens strictly increase;
* ``checkpoint_gap``, ``lost_step``, ``step_twice``: checkpoints are numbered 1..n without gaps;
  a succeeded run committed every step of its workflow exactly once, in order; any other run a
  prefix of them;
* ``chunk_gap`` / ``chunk_log``: a session's chunk sequence numbers are contiguous and its texts
  are exactly the committed steps' chunks, once each, in order;
* ``slow_recovery``: after each fault heals, every run the fault caught committed its next step
  (or finished) within the bound;
* interrupts (the drill's operator resolves each over the API, then asks again with another
  decision): ``resolved_twice``: at most one resolve request per interrupt is answered 2xx,
  and every later one is a 409 (``second_resolve``: anything else); ``decision_changed``: the
  interrupt holds the decision of the request that was accepted; ``lost_resolution``: an
  accepted resolution is in the database, with its ``interrupt.resolved`` event, and its run
  committed the interrupted step after it; ``resumed_twice``: one ``interrupt.resolved`` event
  and one commit of the interrupted step per resolution; ``resumed_before_decision``: that
  commit comes after the event; ``unresolved_interrupt``: none is left pending. The report
  holds, per fault, the seconds from each resolution to the commit of the step it resumed;
* ``artifact_unreadable``: every artifact a committed checkpoint references is readable from
  the store after the drill and matches its digest.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Submission:
    run: str
    at: float
    #: "" is the history's default workflow (:attr:`History.steps`, :attr:`History.effects`).
    workflow: str = ""


@dataclass(frozen=True)
class Claim:
    """A ``run.claimed`` event: the run's event ``seq``, the new fencing token, the worker."""

    run: str
    seq: int
    token: int
    worker: str
    at: float


@dataclass(frozen=True)
class Commit:
    """A ``step.completed`` event and the checkpoint it wrote (its fencing token)."""

    run: str
    seq: int
    checkpoint: int
    step: str
    token: int
    at: float


@dataclass(frozen=True)
class Chunk:
    session: str
    seq: int
    text: str


@dataclass(frozen=True)
class TargetCall:
    """A request as the effect target saw it: ``applied`` is what the target did with it."""

    key: str
    kind: str
    run: str
    effect: str
    applied: bool
    at: float


@dataclass(frozen=True)
class LedgerEffect:
    run: str
    key: str
    idempotency_key: str
    effect_class: str
    status: str


@dataclass(frozen=True)
class Outcome:
    run: str
    status: str
    session: str
    review_reason: str = ""


@dataclass(frozen=True)
class Fault:
    """A fault injected on ``host`` from ``started`` until ``healed``; ``runs``: the runs a
    worker of that host held when it started."""

    name: str
    host: str
    started: float
    healed: float
    runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """One resolve request the drill's operator sent over the API: ``status`` is the HTTP
    status it got (0: no answer), ``by`` who the API recorded as deciding (from a 2xx answer),
    ``at`` when the answer came (drill clock), ``fault`` the fault it was sent under and
    ``phase`` when (``before``, ``during``, ``after`` the fault)."""

    interrupt: str
    run: str
    decision: str
    status: int
    at: float
    by: str = ""
    fault: str = ""
    phase: str = ""


@dataclass(frozen=True)
class InterruptRecord:
    """An interrupt as the database holds it after the drill (``resolved_at`` on the database
    clock, as commits are), and the event ``seq`` of every ``interrupt.resolved`` naming it."""

    id: str
    run: str
    step: str
    status: str
    decision: str = ""
    resolved_by: str = ""
    resolved_at: float | None = None
    resolved_events: tuple[int, ...] = ()


@dataclass(frozen=True)
class ArtifactRead:
    """An artifact a committed checkpoint references, read back from the store after the
    drill: ``readable`` when it was there and its bytes matched ``digest``."""

    run: str
    checkpoint: int
    digest: str
    readable: bool
    detail: str = ""


@dataclass
class History:
    #: workflow steps in order, and the effects each run must have applied (effect names).
    steps: tuple[str, ...]
    effects: tuple[str, ...]
    chunk_text: Callable[[str, str], str]
    #: The host a worker (a lease owner) runs on.
    host_of: Callable[[str], str] = str
    submissions: list[Submission] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    target: list[TargetCall] = field(default_factory=list)
    ledger: list[LedgerEffect] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    #: Other workflows' steps and effects, by the name a :class:`Submission` gives.
    workflows: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    resolutions: list[Resolution] = field(default_factory=list)
    interrupts: list[InterruptRecord] = field(default_factory=list)
    artifacts: list[ArtifactRead] = field(default_factory=list)

    def plan_of(self, run: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The steps and the effects of ``run``'s workflow."""
        workflow = self._workflow_of().get(run, "")
        return self.workflows.get(workflow, (self.steps, self.effects))

    def _workflow_of(self) -> dict[str, str]:
        return {s.run: s.workflow for s in self.submissions}


@dataclass(frozen=True)
class Violation:
    kind: str
    subject: str
    detail: str


@dataclass
class Report:
    violations: list[Violation]
    #: fault name -> seconds from its heal until every run it caught moved on again.
    recovery: dict[str, float]
    counts: dict[str, int]
    #: fault name -> seconds from its heal until the faulted host claimed or committed again.
    host_recovery: dict[str, float] = field(default_factory=dict)
    #: fault name -> seconds from each resolution sent under it to the commit of the step it
    #: resumed.
    resume: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def recovery_summary(self) -> dict[str, float]:
        return summary(list(self.recovery.values()))

    def host_recovery_summary(self) -> dict[str, float]:
        return summary(list(self.host_recovery.values()))

    def resume_summary(self) -> dict[str, float]:
        """p50/max over every resolution's resolution-to-resume time."""
        return summary([s for seconds in self.resume.values() for s in seconds])


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"p50": statistics.median(values), "max": max(values)}


def _by_run(items: list[T], key: Callable[[T], str]) -> dict[str, list[T]]:
    grouped: dict[str, list[T]] = defaultdict(list)
    for item in items:
        grouped[key(item)].append(item)
    return grouped


def check(history: History, *, recovery_bound: float = 120.0) -> Report:
    """Every violation of the module's invariants in ``history``, and the recovery times."""
    found: list[Violation] = []
    outcomes = {o.run: o for o in history.outcomes}
    claims = _by_run(history.claims, lambda c: c.run)
    commits = _by_run(history.commits, lambda c: c.run)
    ledger = _by_run(history.ledger, lambda e: e.run)

    for submission in history.submissions:
        run = submission.run
        outcome = outcomes.get(run)
        if outcome is None or outcome.status in {"queued", "running", "waiting"}:
            status = outcome.status if outcome else "missing"
            found.append(Violation("not_terminal", run, f"status {status}"))
            continue
        if outcome.status == "needs_review":
            if not any(e.status == "needs_review" for e in ledger.get(run, [])):
                found.append(
                    Violation("bad_terminal", run, f"needs_review without an effect to review: "
                              f"{outcome.review_reason!r}")
                )  # fmt: skip
        elif outcome.status != "succeeded":
            found.append(Violation("bad_terminal", run, f"status {outcome.status}"))

    found += _check_fencing(history, claims, commits)
    found += _check_steps(history, commits, outcomes)
    found += _check_chunks(history, commits, outcomes)
    found += _check_effects(history, outcomes)
    interrupt_violations, resume = _check_interrupts(history, commits)
    found += interrupt_violations
    found += [
        Violation("artifact_unreadable", f"{a.run}@{a.checkpoint}", f"{a.digest}: {a.detail}")
        for a in history.artifacts
        if not a.readable
    ]
    recovery = _recovery(history, commits, outcomes)
    found += [
        Violation("slow_recovery", name, f"{seconds:.1f}s > {recovery_bound}s")
        for name, seconds in recovery.items()
        if seconds > recovery_bound
    ]
    host_recovery = _host_recovery(history, claims)
    found += [
        Violation("host_not_back", name, f"{seconds:.1f}s > {recovery_bound}s")
        for name, seconds in host_recovery.items()
        if seconds > recovery_bound
    ]
    counts = {
        "runs": len(history.submissions),
        "succeeded": sum(o.status == "succeeded" for o in history.outcomes),
        "needs_review": sum(o.status == "needs_review" for o in history.outcomes),
        "claims": len(history.claims),
        "takeovers": sum(max(0, len(c) - 1) for c in claims.values()),
        "commits": len(history.commits),
        "chunks": len(history.chunks),
        "target_requests": len(history.target),
        "faults": len(history.faults),
        "interrupts": len(history.interrupts),
        "resolve_requests": len(history.resolutions),
        "resolve_409": sum(r.status == 409 for r in history.resolutions),
        "artifacts_read": len(history.artifacts),
    }
    return Report(found, recovery, counts, host_recovery, resume)


def _check_fencing(
    history: History, claims: dict[str, list[Claim]], commits: dict[str, list[Commit]]
) -> list[Violation]:
    found = []
    for run in {*claims, *commits}:
        events: list[Claim | Commit] = sorted(
            [*claims.get(run, []), *commits.get(run, [])], key=lambda e: e.seq
        )
        latest: int | None = None
        for event in events:
            if isinstance(event, Claim):
                if latest is not None and event.token <= latest:
                    found.append(
                        Violation("claim_order", run, f"token {event.token} after {latest}")
                    )
                latest = event.token
            elif latest is None or event.token != latest:
                found.append(
                    Violation("stale_commit", run, f"checkpoint {event.checkpoint} ({event.step}) "
                              f"token {event.token}, latest claim {latest}")
                )  # fmt: skip
    return found


def _check_steps(
    history: History, commits: dict[str, list[Commit]], outcomes: dict[str, Outcome]
) -> list[Violation]:
    found = []
    for submission in history.submissions:
        run = submission.run
        ordered = sorted(commits.get(run, []), key=lambda c: c.checkpoint)
        numbers = [c.checkpoint for c in ordered]
        if numbers != list(range(1, len(numbers) + 1)):
            found.append(Violation("checkpoint_gap", run, f"checkpoints {numbers}"))
        steps = tuple(c.step for c in ordered)
        if len(set(steps)) != len(steps):
            found.append(Violation("step_twice", run, f"steps {steps}"))
        status = outcomes[run].status if run in outcomes else ""
        plan = history.plan_of(run)[0]
        expected = plan if status == "succeeded" else plan[: len(steps)]
        if steps != expected:
            found.append(Violation("lost_step", run, f"committed {steps}, expected {expected}"))
    return found


def _check_chunks(
    history: History, commits: dict[str, list[Commit]], outcomes: dict[str, Outcome]
) -> list[Violation]:
    found = []
    sessions = _by_run(history.chunks, lambda c: c.session)
    for submission in history.submissions:
        run = submission.run
        outcome = outcomes.get(run)
        if outcome is None or not outcome.session:
            continue
        chunks = sorted(sessions.get(outcome.session, []), key=lambda c: c.seq)
        numbers = [c.seq for c in chunks]
        if numbers and numbers != list(range(numbers[0], numbers[0] + len(numbers))):
            found.append(Violation("chunk_gap", run, f"chunk seqs {numbers}"))
        committed = sorted(commits.get(run, []), key=lambda c: c.checkpoint)
        expected = [history.chunk_text(c.step, run) for c in committed]
        texts = [c.text for c in chunks]
        if texts != expected:
            found.append(Violation("chunk_log", run, f"chunks {texts}, expected {expected}"))
    return found


def _check_effects(history: History, outcomes: dict[str, Outcome]) -> list[Violation]:
    found = []
    applied: dict[str, int] = defaultdict(int)
    for call in history.target:
        applied[call.key] += call.applied
    for key, count in applied.items():
        if count > 1:
            found.append(Violation("effect_applied_twice", key, f"applied {count} times"))
    per_run: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for call in history.target:
        per_run[call.run][call.effect] += call.applied
    for run, outcome in outcomes.items():
        if outcome.status != "succeeded":
            continue
        for effect in history.plan_of(run)[1]:
            if per_run[run][effect] != 1:
                found.append(
                    Violation("effect_missing", run, f"{effect} applied {per_run[run][effect]}x")
                )
    return found


def _check_interrupts(
    history: History, commits: dict[str, list[Commit]]
) -> tuple[list[Violation], dict[str, list[float]]]:
    """The interrupt rules of the module docstring, and the resolution-to-resume times."""
    found = []
    resume: dict[str, list[float]] = defaultdict(list)
    records = {i.id: i for i in history.interrupts}
    requests = _by_run(history.resolutions, lambda r: r.interrupt)
    for interrupt in sorted({*records, *requests}):
        sent = sorted(requests.get(interrupt, []), key=lambda r: r.at)
        accepted = [r for r in sent if 200 <= r.status < 300]
        if len(accepted) > 1:
            found.append(
                Violation("resolved_twice", interrupt, f"{len(accepted)} resolve requests "
                          f"accepted: {[r.decision for r in accepted]}")
            )  # fmt: skip
        if accepted:
            later = [r for r in sent if r.at > accepted[0].at and not 200 <= r.status < 300]
            found += [
                Violation("second_resolve", interrupt, f"a later {r.decision!r} got {r.status}")
                for r in later
                if r.status != 409
            ]
        record = records.get(interrupt)
        if record is None or record.status == "pending":
            if accepted:
                found.append(
                    Violation("lost_resolution", interrupt, f"accepted ({accepted[0].decision}) "
                              f"but {record.status if record else 'missing'} in the database")
                )  # fmt: skip
            elif record is not None:
                found.append(Violation("unresolved_interrupt", interrupt, f"run {record.run}"))
            continue
        if record.status != "resolved":
            continue  # expired: the drill resolves well before any timeout (none is declared)
        if accepted and record.decision != accepted[0].decision:
            found.append(
                Violation("decision_changed", interrupt, f"accepted {accepted[0].decision!r}, "
                          f"the database holds {record.decision!r}")
            )  # fmt: skip
        if not record.resolved_events:
            found.append(Violation("lost_resolution", interrupt, "no interrupt.resolved event"))
            continue
        if len(record.resolved_events) > 1:
            found.append(
                Violation("resumed_twice", interrupt, f"interrupt.resolved events at "
                          f"{list(record.resolved_events)}")
            )  # fmt: skip
        event = min(record.resolved_events)
        of_step = [c for c in commits.get(record.run, []) if c.step == record.step]
        early = [c for c in of_step if c.seq < event]
        after = [c for c in of_step if c.seq > event]
        if early:
            found.append(
                Violation("resumed_before_decision", interrupt, f"{record.step} committed at "
                          f"event {early[0].seq}, the decision is event {event}")
            )  # fmt: skip
        if not after:
            found.append(
                Violation("lost_resolution", interrupt, f"{record.run} never committed "
                          f"{record.step} after the decision")
            )  # fmt: skip
            continue
        if len(after) > 1:
            found.append(
                Violation("resumed_twice", interrupt, f"{record.step} committed {len(after)}x")
            )
        if record.resolved_at is not None:
            fault = accepted[0].fault if accepted else (sent[0].fault if sent else "")
            first = min(after, key=lambda c: c.seq)
            resume[fault].append(max(0.0, first.at - record.resolved_at))
    return found, dict(resume)


def _recovery(
    history: History, commits: dict[str, list[Commit]], outcomes: dict[str, Outcome]
) -> dict[str, float]:
    """Per fault: the longest wait, from the heal, until a run it caught committed a step after
    the fault began (0 when that happened before the heal: another host took the run over)."""
    recovery = {}
    for fault in history.faults:
        waits = []
        for run in fault.runs:
            later = [c.at for c in commits.get(run, []) if c.at > fault.started]
            if later:
                waits.append(max(0.0, min(later) - fault.healed))
            elif outcomes.get(run) and outcomes[run].status == "needs_review":
                waits.append(0.0)  # stopped for a person, by design: nothing to recover
            else:
                waits.append(float("inf"))
        recovery[fault.name] = max(waits, default=0.0)
    return recovery


def _host_recovery(history: History, claims: dict[str, list[Claim]]) -> dict[str, float]:
    """Per fault: seconds from the heal until a worker of the faulted host claimed a run or
    committed a step (a commit is the worker's whose claim preceded it in the run's events)."""
    acts: dict[str, list[float]] = defaultdict(list)
    for claim in history.claims:
        acts[history.host_of(claim.worker)].append(claim.at)
    for commit in history.commits:
        before = [c for c in claims.get(commit.run, []) if c.seq < commit.seq]
        if before:
            holder = max(before, key=lambda c: c.seq)
            acts[history.host_of(holder.worker)].append(commit.at)
    recovery = {}
    for fault in history.faults:
        later = [at for at in acts.get(fault.host, []) if at >= fault.healed]
        recovery[fault.name] = min(later) - fault.healed if later else float("inf")
    return recovery
