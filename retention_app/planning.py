"""What a retention pass may remove from one project, decided over its lineage graph. Pure Python.

The planner sees the project as a graph: sessions (with their copy-on-write ``base`` and their
lineage parents), runs (with their fan-out parent, the run they were forked from, the run they
replay, and the sessions they reference) and the facts that pin an object (a pending interrupt,
an unresolved effect, an active writer, a row of another app that points at it). It returns the
runs and sessions to delete, and the kept runs whose events and checkpoints may be pruned.

The rules, in order (docs/operations.md, "Retention"):

1. A run *family* (a top-level run and the branch runs of its fan-outs) goes or stays as one.
   It is expired when its newest activity is older than ``runs.max_age`` or when its root is
   not among the project's newest ``runs.keep_last`` roots. It is protected when any member is
   not terminal or is pinned.
2. A run that is kept keeps the run it was forked from and the run it replays (their families
   too), to a fixpoint.
3. A session is expired by ``sessions`` limits the same way (age of its last change, or not
   among the newest ``keep_last``). It is kept when not expired, when a kept run references it
   (its working session or a checkpoint's), or when it is pinned; every ancestor of a kept
   session (its ``base`` chain and its lineage parents) is kept too, so a branch point with a
   kept child always stays.
4. Events and checkpoints are pruned only in kept runs that are terminal and whose history no
   other kept run shares (neither a fork parent nor a replay source of one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

#: The run statuses after which nothing changes a run any more (``runs_app.transitions``).
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "timed_out"})


@dataclass(frozen=True)
class Limits:
    """Keep what is younger than ``max_age`` and among the newest ``keep_last``; ``None`` on
    both: keep everything. An object goes when it breaks either limit that is set."""

    max_age: timedelta | None = None
    keep_last: int | None = None

    @property
    def active(self) -> bool:
        return self.max_age is not None or self.keep_last is not None


@dataclass(frozen=True)
class Policy:
    """The limits of one project, by kind of object."""

    sessions: Limits = Limits()
    runs: Limits = Limits()
    events: Limits = Limits()
    checkpoints: Limits = Limits()


@dataclass(frozen=True)
class SessionNode:
    """A session as the planner sees it. ``parents`` are its lineage parents; ``pinned``: a
    row the planner does not model points at it (memory, an active writer)."""

    id: str
    created_at: datetime
    touched_at: datetime
    base: str | None = None
    parents: tuple[str, ...] = ()
    pinned: bool = False


@dataclass(frozen=True)
class RunNode:
    """A run as the planner sees it. ``sessions``: every session it references (its working
    session and the sessions of its checkpoints); ``pinned``: a pending interrupt, an
    unresolved effect, or a row the planner does not model that points at it."""

    id: str
    status: str
    created_at: datetime
    touched_at: datetime
    parent: str | None = None
    forked_from: str | None = None
    replay_of: str | None = None
    #: Other runs this one points at (the run it was queued after, the run that replaced it):
    #: kept while it is kept, like the run it was forked from.
    refers_to: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    pinned: bool = False

    def sources(self) -> list[tuple[str, str]]:
        """``(run id, reason)`` of every other run a kept copy of this one needs."""
        out = [(r, "referenced") for r in self.refers_to]
        if self.forked_from is not None:
            out.append((self.forked_from, "fork_parent"))
        if self.replay_of is not None:
            out.append((self.replay_of, "replay"))
        return out


@dataclass
class Plan:
    """The outcome: what to delete, and which kept runs' events and checkpoints may be pruned.
    ``runs`` lists whole families, children before parents; ``sessions`` descendants before
    ancestors (an order in which every deletion leaves no dangling reference)."""

    runs: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    prunable_runs: list[str] = field(default_factory=list)
    kept_runs: set[str] = field(default_factory=set)
    kept_sessions: set[str] = field(default_factory=set)
    #: Why objects that the limits expired were kept, counted by reason.
    protected: dict[str, int] = field(default_factory=dict)


def _expired(
    items: list[tuple[str, datetime, datetime]], limits: Limits, now: datetime
) -> set[str]:
    """The ids of ``(id, created_at, touched_at)`` items that break ``limits``: touched before
    ``now - max_age``, or not among the newest ``keep_last`` by creation."""
    if not limits.active:
        return set()
    out: set[str] = set()
    if limits.max_age is not None:
        cutoff = now - limits.max_age
        out |= {item_id for item_id, _, touched in items if touched < cutoff}
    if limits.keep_last is not None:
        newest_first = sorted(items, key=lambda item: (item[1], item[0]), reverse=True)
        out |= {item_id for item_id, _, _ in newest_first[limits.keep_last :]}
    return out


def _count(reasons: dict[str, int], reason: str) -> None:
    reasons[reason] = reasons.get(reason, 0) + 1


def plan(
    *,
    sessions: Iterable[SessionNode],
    runs: Iterable[RunNode],
    policy: Policy,
    now: datetime,
) -> Plan:
    """Decide what a pass removes from one project (see the module's rules)."""
    session_map = {node.id: node for node in sessions}
    run_map = {node.id: node for node in runs}
    result = Plan()

    # 1. Families: root -> members (a member's parent outside the project counts as its root).
    def root_of(run_id: str) -> str:
        seen: set[str] = set()
        while True:
            parent = run_map[run_id].parent
            if parent is None or parent not in run_map or run_id in seen:
                return run_id
            seen.add(run_id)
            run_id = parent

    families: dict[str, list[str]] = {}
    for run_id in run_map:
        families.setdefault(root_of(run_id), []).append(run_id)
    family_of = {member: root for root, members in families.items() for member in members}
    items = [
        (
            root,
            run_map[root].created_at,
            max(run_map[member].touched_at for member in members),
        )
        for root, members in families.items()
    ]
    expired_families = _expired(items, policy.runs, now)
    kept_families = set(families) - expired_families
    for root in expired_families:
        members = [run_map[m] for m in families[root]]
        if any(m.status not in TERMINAL_STATUSES for m in members):
            _count(result.protected, "run_not_terminal")
            kept_families.add(root)
        elif any(m.pinned for m in members):
            _count(result.protected, "run_pinned")
            kept_families.add(root)

    # 2. A kept run keeps what it was forked from and what it replays.
    pending = list(kept_families)
    while pending:
        root = pending.pop()
        for member in families[root]:
            node = run_map[member]
            for source, reason in node.sources():
                if source not in run_map:
                    continue
                source_root = family_of[source]
                if source_root not in kept_families:
                    _count(result.protected, f"run_{reason}")
                    kept_families.add(source_root)
                    pending.append(source_root)
    result.kept_runs = {m for root in kept_families for m in families[root]}
    deleted_roots = {root for root in families if root not in kept_families}
    # Families whose runs fork or replay another family's go first (their rows point at it).
    family_sources = {
        root: {
            family_of[source]
            for member in families[root]
            for source, _ in run_map[member].sources()
            if source in run_map and family_of[source] != root
        }
        for root in deleted_roots
    }
    for root in _leaves_first(deleted_roots, family_sources):
        family = families[root]
        inner = {m: {run_map[m].parent or ""} & set(family) for m in family}
        result.runs.extend(_leaves_first(set(family), inner))

    # 3. Sessions.
    session_items = [(n.id, n.created_at, n.touched_at) for n in session_map.values()]
    expired_sessions = _expired(session_items, policy.sessions, now)
    kept: set[str] = set(session_map) - expired_sessions
    referenced = {s for r in result.kept_runs for s in run_map[r].sessions}
    for session_id in expired_sessions:
        if session_id in referenced:
            _count(result.protected, "session_of_kept_run")
            kept.add(session_id)
        elif session_map[session_id].pinned:
            _count(result.protected, "session_pinned")
            kept.add(session_id)
    # Every ancestor of a kept session stays (base chain and lineage parents: branch points).
    stack = list(kept)
    while stack:
        session = session_map[stack.pop()]
        for ancestor in (session.base, *session.parents):
            if ancestor is None or ancestor not in session_map or ancestor in kept:
                continue
            _count(result.protected, "session_ancestor")
            kept.add(ancestor)
            stack.append(ancestor)
    result.kept_sessions = kept
    doomed = {s for s in session_map if s not in kept}
    # Every descendant of a doomed session is doomed too (a kept one would keep it): deleting
    # leaves first never leaves a row pointing at a deleted one.
    result.sessions = _leaves_first(
        doomed,
        {
            s: {a for a in (session_map[s].base, *session_map[s].parents) if a in doomed}
            for s in doomed
        },
    )

    # 4. Kept terminal runs whose history no kept run shares.
    if policy.events.active or policy.checkpoints.active:
        shared = {
            source
            for r in result.kept_runs
            for source in (run_map[r].forked_from, run_map[r].replay_of)
            if source is not None
        }
        result.prunable_runs = sorted(
            r
            for r in result.kept_runs
            if run_map[r].status in TERMINAL_STATUSES and r not in shared
        )
    return result


def _leaves_first(nodes: set[str], parents: dict[str, set[str]]) -> list[str]:
    """``nodes`` ordered so that each comes before every node in its ``parents`` (ties by id);
    a cycle (which lineage never has) is broken by id rather than looping."""
    children: dict[str, set[str]] = {n: set() for n in nodes}
    for node in nodes:
        for parent in parents.get(node, ()):
            if parent in children and parent != node:
                children[parent].add(node)
    remaining = {n: len(children[n]) for n in nodes}
    ready = sorted(n for n, count in remaining.items() if count == 0)
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(nodes):
        if not ready:  # a cycle: take the smallest id left
            ready = [min(n for n in nodes if n not in done)]
        node = ready.pop(0)
        if node in done:
            continue
        done.add(node)
        order.append(node)
        for parent in sorted(parents.get(node, ())):
            if parent in remaining and parent not in done and parent != node:
                remaining[parent] -= 1
                if remaining[parent] == 0:
                    ready.append(parent)
        ready.sort()
    return order
