"""The planner alone (no database): limits, families, fixpoints and deletion order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from retention_app.planning import Limits, Policy, RunNode, SessionNode, plan

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def s(id_: str, days: int, base: str | None = None, parents: tuple[str, ...] = ()) -> SessionNode:
    when = NOW - timedelta(days=days)
    return SessionNode(id=id_, created_at=when, touched_at=when, base=base, parents=parents)


def r(id_: str, days: int, status: str = "succeeded", **links: object) -> RunNode:
    when = NOW - timedelta(days=days)
    return RunNode(id=id_, status=status, created_at=when, touched_at=when, **links)  # type: ignore[arg-type]


def test_either_limit_expires_an_object() -> None:
    runs = [r("a", 50), r("b", 5), r("c", 4), r("d", 3)]
    by_age = plan(
        sessions=[], runs=runs, policy=Policy(runs=Limits(max_age=timedelta(10))), now=NOW
    )
    assert by_age.runs == ["a"]
    both = Policy(runs=Limits(max_age=timedelta(10), keep_last=2))
    assert sorted(plan(sessions=[], runs=runs, policy=both, now=NOW).runs) == ["a", "b"]


def test_dependents_are_deleted_before_what_they_point_at() -> None:
    runs = [
        r("src", 90),
        r("fork", 80, forked_from="src"),
        r("replay", 70, replay_of="fork"),
        r("branch", 90, parent="src"),
    ]
    result = plan(sessions=[], runs=runs, policy=Policy(runs=Limits(keep_last=0)), now=NOW)
    order = result.runs
    assert order.index("replay") < order.index("fork") < order.index("src")
    assert order.index("branch") < order.index("src")


def test_a_kept_fork_keeps_its_chain_and_a_kept_leaf_its_ancestors() -> None:
    runs = [r("g", 90), r("p", 80, forked_from="g"), r("c", 1, forked_from="p")]
    sessions = [
        s("root", 90),
        s("mid", 80, base="root", parents=("root",)),
        s("leaf", 1, base="mid", parents=("mid",)),
        s("other", 80, base="root", parents=("root",)),
    ]
    policy = Policy(runs=Limits(max_age=timedelta(30)), sessions=Limits(max_age=timedelta(30)))
    result = plan(sessions=sessions, runs=runs, policy=policy, now=NOW)
    assert result.runs == []
    assert result.protected["run_fork_parent"] == 2
    assert result.sessions == ["other"]
    assert result.kept_sessions == {"root", "mid", "leaf"}
