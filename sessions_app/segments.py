"""Copy-on-write storage math. Pure Python.

A session stores only its own chunks; its logical list is its base's first ``base_len`` chunks
(recursively) followed by its own. Resolving that chain gives *segments*: which stored session
holds which range of logical positions. Two sessions share a logical prefix exactly where their
segments name the same stored session for the same positions, which is how a merge finds the
common ancestor without comparing chunk contents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    """Positions ``[start, stop)`` of a logical list are stored in session ``holder``."""

    holder: str
    start: int
    stop: int

    @property
    def length(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class ChainLink:
    """One stored session on a base chain: its own chunks sit at ``[base_len, base_len+own)``."""

    id: str
    base_id: str | None
    base_len: int
    own_len: int


def segments_for(chain: Sequence[ChainLink], length: int | None = None) -> list[Segment]:
    """Segments of the first ``length`` logical positions of ``chain[0]``, in position order.

    ``chain`` starts at the session and follows ``base_id`` links to the root.
    """
    if not chain:
        return []
    head = chain[0]
    cap = head.base_len + head.own_len if length is None else length
    segments: list[Segment] = []
    for link in chain:
        stop = min(cap, link.base_len + link.own_len)
        if stop > link.base_len:
            segments.append(Segment(link.id, link.base_len, stop))
        cap = min(cap, link.base_len)
        if cap <= 0:
            break
    segments.reverse()
    return segments


def common_prefix_length(segment_lists: Sequence[Sequence[Segment]]) -> int:
    """The longest logical prefix that every list stores in the same place (shared storage)."""
    if not segment_lists:
        return 0
    prefix = 0
    first = segment_lists[0]
    for segment in first:
        shared_stop = segment.stop
        for other in segment_lists[1:]:
            match = next(
                (s for s in other if s.holder == segment.holder and s.start <= prefix < s.stop),
                None,
            )
            if match is None or match.start != segment.start:
                return prefix
            shared_stop = min(shared_stop, match.stop)
        if shared_stop <= prefix:
            return prefix
        prefix = shared_stop
        if shared_stop < segment.stop:
            return prefix
    return prefix


def shortest_base(chain: Sequence[ChainLink], at: int) -> tuple[str, int]:
    """Where a fork at logical length ``at`` should point: the stored session that holds
    position ``at - 1`` (the nearest one on the chain), so chains stay as short as they can."""
    if at <= 0:
        raise ValueError("a fork at length 0 has no base")
    for link in chain:
        if link.base_len < at:
            return link.id, at
    raise ValueError(f"no session on the chain holds position {at - 1}")
