"""Compare two runs of one fork lineage: where their histories part, and what differs since.

Two runs are comparable when one is a fork ancestor of the other, or both descend (through
``RunFork`` edges, any number of generations) from one run: the *common run* is the nearest
such run (or one of the two). A fork at checkpoint ``k`` continues its parent's numbering and
its history before ``k`` is its parent's, so each run's history is a sequence of segments, each
run by one run of its lineage (:func:`history_owners`). The *common checkpoint* is the first
checkpoint after which the two histories' steps were run by different runs; up to it the two
runs are the same history (a fork's state patch applies on top of its branch checkpoint):

* ``a`` is an ancestor of ``b``: where ``b``'s lineage leaves ``a``;
* siblings forked at 2 and at 5 of one parent: 2 (the fork at 5 also lived the parent's steps
  after checkpoints 2..4, which are on its side of the comparison);
* a fork of a fork taken before the latter's own branch point shares only the grandparent's
  history with it.

The comparison reads: each run's current state and their ``json_diff`` (from ``a`` to ``b``);
each working session's chunks from the common checkpoint's session length on (the prefix is
the same stored chunks, so it is not repeated), at most ``limit`` a side with the count of the
rest; and the effects each side's history recorded after the common checkpoint: the side's run's
own and those of its ancestors in the segments after the common checkpoint, whatever their
status (``succeeded`` ones were performed; a fork's ``effect_in_ancestor`` review shows up
with its status and resolution).

Fan-out branch runs (``Run.parent``) are not fork lineage: a branch is part of its parent's
execution, and its effects are its own run's. Reads only; no lock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from effects_app.models import EffectRecord
from openrath_project.errors import Conflict
from openrath_project.jsondiff import json_diff
from runs_app.models import Checkpoint, Run, RunFork
from runs_app.services.checkpoints import run_state_at
from sessions_app import selectors as session_selectors
from sessions_app.models import Chunk

__all__ = [
    "COMPARE_CHUNKS_DEFAULT",
    "COMPARE_CHUNKS_MAX",
    "COMPARE_EFFECTS_SHOWN",
    "COMPARE_MAX_GENERATIONS",
    "CompareSide",
    "RunComparison",
    "TimelineSegment",
    "fork_chain",
    "history_owners",
    "run_compare",
]

#: How many fork generations above a run are followed (one query each) before giving up.
COMPARE_MAX_GENERATIONS = 100
#: Chunks shown per side after the common prefix: the default and the largest ``limit``.
COMPARE_CHUNKS_DEFAULT = 50
COMPARE_CHUNKS_MAX = 200
#: Effects listed per side (the rest is counted).
COMPARE_EFFECTS_SHOWN = 200
#: Changes listed in the state diff (``json_diff``'s limit).
COMPARE_DIFF_CHANGES = 500


@dataclass(frozen=True)
class TimelineSegment:
    """The part of one run's history that belongs to a side's timeline: its checkpoints
    ``from_checkpoint <= seq < until_checkpoint`` (``None``: unbounded on that end)."""

    run_id: uuid.UUID
    from_checkpoint: int | None
    until_checkpoint: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": str(self.run_id),
            "from_checkpoint": self.from_checkpoint,
            "until_checkpoint": self.until_checkpoint,
        }


@dataclass
class CompareSide:
    """One run of the comparison and what its timeline holds after the common checkpoint."""

    run: Run
    #: Where this side's lineage leaves the common run (``None``: it is the common run).
    branch_checkpoint: int | None
    #: From the common run down to ``run``.
    timeline: list[TimelineSegment]
    state: dict[str, Any]
    chunks: list[Chunk]
    #: The session position the chunks start at (the common prefix's length).
    chunks_from: int
    #: Chunks of the run's view after the ones listed.
    chunks_more: int
    effects: list[EffectRecord] = field(default_factory=list)
    effects_more: int = 0


@dataclass
class RunComparison:
    """The comparison of ``a`` and ``b``: :func:`run_compare`'s result."""

    a: CompareSide
    b: CompareSide
    common_run: Run
    common_checkpoint: int
    #: Chunks the two working sessions share (the common checkpoint's session length).
    common_length: int
    #: Fork edges between the two runs through the common run.
    generations: int
    state_diff: list[dict[str, Any]]


def fork_chain(run: Run) -> list[tuple[uuid.UUID, int | None]]:
    """``run`` and its fork ancestors, nearest first: ``[(run.id, None), (parent, k1),
    (grandparent, k2), ...]`` where ``k`` is the checkpoint at which the lineage leaves that
    ancestor. One query per generation, at most ``COMPARE_MAX_GENERATIONS`` (then
    :class:`Conflict`). The edges never leave the run's tenant."""
    chain: list[tuple[uuid.UUID, int | None]] = [(run.id, None)]
    seen = {run.id}
    current = run.id
    for _ in range(COMPARE_MAX_GENERATIONS):
        # scope: the caller holds ``run`` in scope; a fork edge never leaves its tenant.
        edge = (
            RunFork.objects.unscoped()
            .filter(tenant_id=run.tenant_id, child_id=current)
            .values_list("parent_id", "checkpoint_seq")
            .first()
        )
        if edge is None:
            return chain
        parent_id, checkpoint = edge
        if parent_id in seen:  # impossible by construction (a child is forked once)
            break
        chain.append((parent_id, int(checkpoint)))
        seen.add(parent_id)
        current = parent_id
    raise Conflict(
        f"run {run.id} has more than {COMPARE_MAX_GENERATIONS} fork generations to follow",
        code="lineage_too_deep",
        details={"run": str(run.id), "max_generations": COMPARE_MAX_GENERATIONS},
    )


Interval = tuple[uuid.UUID, int, int | None]


def history_owners(chain: list[tuple[uuid.UUID, int | None]]) -> list[Interval]:
    """Which run executed the steps of a run's history, oldest first: ``(run, lo, hi)`` for the
    steps started after checkpoints ``lo <= seq < hi`` (``hi`` ``None``: on from ``lo``).

    A fork at ``k`` numbers its own checkpoints ``k + 1, ...`` and its history before ``k`` is
    its parent's (``runs_app.services.forks``), so a run owns the steps from its branch point up
    to where the lineage leaves it toward the run asked about (the smallest branch point below
    it: a fork of a fork taken before the latter's own branch point lives none of its steps)."""
    owners: list[Interval] = []
    upper: int | None = None
    for index, (run_id, _) in enumerate(chain):
        # The run's branch point: the checkpoint where the lineage leaves its parent (0: a root).
        low = chain[index + 1][1] if index + 1 < len(chain) else 0
        low = int(low or 0)
        if upper is None or low < upper:
            owners.append((run_id, low, upper))
            upper = low
    owners.reverse()
    return owners


def _owner(owners: list[Interval], seq: int) -> uuid.UUID:
    for run_id, low, high in owners:
        if low <= seq and (high is None or seq < high):
            return run_id
    raise AssertionError(f"no run owns checkpoint {seq}")  # the intervals cover 0..


def _divergence(a: list[Interval], b: list[Interval]) -> int | None:
    """The first checkpoint after which the two histories' steps were run by different runs
    (``None``: the same history)."""
    bounds = sorted({0} | {low for _, low, _ in a + b} | {h for *_, h in a + b if h is not None})
    return next((seq for seq in bounds if _owner(a, seq) != _owner(b, seq)), None)


def _timeline(owners: list[Interval], common_checkpoint: int) -> list[TimelineSegment]:
    """A side's history after the common checkpoint, as run segments, oldest first."""
    segments = []
    for run_id, low, high in owners:
        start = max(low, common_checkpoint)
        if high is None or start < high:
            segments.append(TimelineSegment(run_id, start, high))
    return segments


def _effects_of(segments: list[TimelineSegment]) -> tuple[list[EffectRecord], int]:
    """The effect records of a timeline's segments, in timeline order, at most
    ``COMPARE_EFFECTS_SHOWN``, and how many more there are: each segment's run's records whose
    step started after a checkpoint in the segment. Selector decisions (recorded in the ledger
    too) are not effects and are left out. A record without ``checkpoint_seq`` (written before
    the field existed, so by a run that was never forked) is listed only when the segment is
    its run's whole history."""
    shown: list[EffectRecord] = []
    more = 0
    for segment in segments:
        # scope: the segments' runs are the compared runs and their fork ancestors.
        rows = (
            EffectRecord.objects.unscoped()
            .filter(run_id=segment.run_id)
            .exclude(effect_class="decision")
        )
        if segment.from_checkpoint:
            rows = rows.filter(checkpoint_seq__gte=segment.from_checkpoint)
        if segment.until_checkpoint is not None:
            rows = rows.filter(checkpoint_seq__lt=segment.until_checkpoint)
        room = COMPARE_EFFECTS_SHOWN - len(shown)
        page = list(rows.order_by("created_at", "id")[:room]) if room > 0 else []
        shown.extend(page)
        more += rows.count() - len(page) if len(page) == room else 0
    return shown, more


def _session_length_at(
    owners: list[Interval], checkpoint: int, runs: set[uuid.UUID], fallback: int
) -> int:
    """The working session's length at ``checkpoint`` of a history (the prefix every timeline
    through it shares): the checkpoint's row, committed by the run that ran the step before it;
    for checkpoint 0, the branch-point row of a fork taken there (among ``runs``)."""
    query = Checkpoint.objects.filter(seq=checkpoint)
    if checkpoint > 0:
        query = query.filter(run_id=_owner(owners, checkpoint - 1))
    else:
        query = query.filter(run_id__in=runs)
    length = query.values_list("session_len", flat=True).first()
    return fallback if length is None else int(length)


def _chunks_after(run: Run, start: int, limit: int) -> tuple[list[Chunk], int]:
    """The run's view of its working session from position ``start``: at most ``limit`` chunks
    and how many more there are."""
    if run.session_id is None:
        return [], 0
    upto = run.session_len
    rows = session_selectors.chunk_page(run.session_id, after=start - 1, limit=limit, upto=upto)
    return rows, max(0, upto - start - len(rows))


def run_compare(a: Run, b: Run, *, limit: int = COMPARE_CHUNKS_DEFAULT) -> RunComparison:
    """Compare two runs the caller holds in scope (the module docstring says how).
    :class:`Conflict` (``no_common_ancestor``) when no fork lineage joins them; ``limit``
    (1..``COMPARE_CHUNKS_MAX``) bounds the chunks listed per side."""
    limit = max(1, min(limit, COMPARE_CHUNKS_MAX))
    unrelated = Conflict(
        "the two runs share no fork ancestor: compare runs of one fork lineage",
        code="no_common_ancestor",
        details={"a": str(a.id), "b": str(b.id)},
    )
    if a.tenant_id != b.tenant_id:
        raise unrelated
    chain_a, chain_b = fork_chain(a), fork_chain(b)
    in_b = {run_id: i for i, (run_id, _) in enumerate(chain_b)}
    # The nearest common run: the first of a's chain in b's (in a tree, the lowest one).
    found = next(((i, in_b[r]) for i, (r, _) in enumerate(chain_a) if r in in_b), None)
    if found is None:
        raise unrelated
    common_a, common_b = found
    owners_a, owners_b = history_owners(chain_a), history_owners(chain_b)
    diverged = _divergence(owners_a, owners_b)
    common_checkpoint = (
        diverged if diverged is not None else min(a.checkpoint_seq, b.checkpoint_seq)
    )
    common_id = chain_a[common_a][0]
    common = next((r for r in (a, b) if r.id == common_id), None)
    if common is None:
        # scope: the common run is a fork ancestor of runs the caller holds, in their tenant.
        common = Run.objects.unscoped().get(tenant_id=a.tenant_id, id=common_id)
    family = {run_id for run_id, _ in chain_a + chain_b}
    common_length = _session_length_at(
        owners_a, common_checkpoint, family, fallback=min(a.session_len, b.session_len)
    )
    sides = []
    for run, chain, index, owners in (
        (a, chain_a, common_a, owners_a),
        (b, chain_b, common_b, owners_b),
    ):
        # Where the side's history leaves the common run: the smallest branch point below it.
        below = [k for _, k in chain[1 : index + 1] if k is not None]
        timeline = _timeline(owners, common_checkpoint) if diverged is not None else []
        chunks, more = _chunks_after(run, common_length, limit)
        effects, effects_more = _effects_of(timeline)
        sides.append(
            CompareSide(
                run=run,
                branch_checkpoint=min(below) if below else None,
                timeline=timeline,
                state=run_state_at(run),
                chunks=chunks,
                chunks_from=common_length,
                chunks_more=more,
                effects=effects,
                effects_more=effects_more,
            )
        )
    side_a, side_b = sides
    return RunComparison(
        a=side_a,
        b=side_b,
        common_run=common,
        common_checkpoint=common_checkpoint,
        common_length=common_length,
        generations=common_a + common_b,
        state_diff=json_diff(side_a.state, side_b.state, limit=COMPARE_DIFF_CHANGES),
    )
