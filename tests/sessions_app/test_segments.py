"""Copy-on-write storage math, without a database."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.segments import (
    ChainLink,
    Segment,
    common_prefix_length,
    segments_for,
    shortest_base,
)

ROOT = ChainLink("root", None, 0, 10)
FORK = ChainLink("fork", "root", 6, 3)  # sees root[0:6] + 3 own
FORK2 = ChainLink("fork2", "fork", 8, 2)  # sees fork[0:8] (root[0:6] + fork[6:8]) + 2 own


def test_segments_follow_the_chain():
    assert segments_for([ROOT]) == [Segment("root", 0, 10)]
    assert segments_for([FORK, ROOT]) == [Segment("root", 0, 6), Segment("fork", 6, 9)]
    assert segments_for([FORK2, FORK, ROOT]) == [
        Segment("root", 0, 6),
        Segment("fork", 6, 8),
        Segment("fork2", 8, 10),
    ]
    assert segments_for([FORK2, FORK, ROOT], length=5) == [Segment("root", 0, 5)]
    assert segments_for([FORK2, FORK, ROOT], length=7) == [
        Segment("root", 0, 6),
        Segment("fork", 6, 7),
    ]


def test_common_prefix_is_shared_storage():
    a = segments_for([FORK, ROOT])
    b = segments_for([ROOT])
    assert common_prefix_length([a, b]) == 6
    assert common_prefix_length([segments_for([FORK2, FORK, ROOT]), a]) == 8
    sibling = ChainLink("sibling", "root", 4, 5)
    assert common_prefix_length([segments_for([sibling, ROOT]), a]) == 4
    other_root = ChainLink("other", None, 0, 3)
    assert common_prefix_length([segments_for([other_root]), a]) == 0
    assert common_prefix_length([a]) == 9


def test_shortest_base_points_at_the_holder():
    assert shortest_base([FORK2, FORK, ROOT], 10) == ("fork2", 10)
    assert shortest_base([FORK2, FORK, ROOT], 8) == ("fork", 8)
    assert shortest_base([FORK2, FORK, ROOT], 3) == ("root", 3)
    with pytest.raises(ValueError, match="length 0"):
        shortest_base([ROOT], 0)


# No per-example deadline: hypothesis' default 200 ms fails a pure function on a loaded machine.
@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=8))
def test_segments_cover_every_position_once(steps):
    """A random fork chain: the segments tile [0, length) exactly."""
    chain: list[ChainLink] = []
    length = 0
    previous = None
    for index, (fork_at, own) in enumerate(steps):
        base_len = min(fork_at, length) if previous else 0
        link = ChainLink(f"s{index}", previous, base_len if previous else 0, own)
        chain.insert(0, link)
        previous = link.id
        length = link.base_len + own
    segments = segments_for(chain)
    covered = [p for s in segments for p in range(s.start, s.stop)]
    assert covered == list(range(length))
