"""The network drills' history checker (``tests/drills/history.py``) on histories built by hand:
a clean one passes, and each invariant is broken once and named exactly."""

from __future__ import annotations

import dataclasses

import pytest

from tests.drills import history as h

STEPS = ("prepare", "charge", "notify", "finish")


def text(step: str, run: str) -> str:
    return f"{step}:{run}"


def clean(runs: tuple[str, ...] = ("r1", "r2")) -> h.History:
    """Each run claimed once by w1 (token 1) and taken over by w2 (token 2) after two steps."""
    history = h.History(steps=STEPS, effects=("charge", "notify"), chunk_text=text)
    for run in runs:
        session = f"s-{run}"
        history.submissions.append(h.Submission(run, 0.0))
        history.claims.append(h.Claim(run, 1, 1, "w1", 1.0))
        history.commits += [
            h.Commit(run, 2, 1, "prepare", 1, 2.0),
            h.Commit(run, 3, 2, "charge", 1, 3.0),
        ]
        history.claims.append(h.Claim(run, 4, 2, "w2", 10.0))
        history.commits += [
            h.Commit(run, 5, 3, "notify", 2, 11.0),
            h.Commit(run, 6, 4, "finish", 2, 12.0),
        ]
        history.chunks += [h.Chunk(session, i, text(s, run)) for i, s in enumerate(STEPS)]
        history.target += [
            h.TargetCall(f"k-charge-{run}", "once", run, "charge", True, 2.5),
            h.TargetCall(f"k-notify-{run}", "upsert", run, "notify", True, 10.5),
            # an idempotent retry the target deduplicated
            h.TargetCall(f"k-notify-{run}", "upsert", run, "notify", False, 10.8),
        ]
        history.ledger += [
            h.LedgerEffect(run, "charge", f"k-charge-{run}", "non_idempotent", "succeeded"),
            h.LedgerEffect(run, "notify", f"k-notify-{run}", "idempotent", "succeeded"),
        ]
        history.outcomes.append(h.Outcome(run, "succeeded", session))
    history.faults.append(h.Fault("pg-partition", "w1", 4.0, 9.0, runs))
    # w1 is back 0.5 s after the heal: it claims a run the checker is not asked about
    history.claims.append(h.Claim("other", 1, 1, "w1", 9.5))
    return history


def kinds(report: h.Report) -> list[tuple[str, str]]:
    return sorted((v.kind, v.subject) for v in report.violations)


def test_a_clean_history_passes_with_its_recovery_time() -> None:
    report = h.check(clean())
    assert report.violations == []
    assert report.ok
    # healed at 9.0, the first commit after the fault began is at 11.0 for both runs
    assert report.recovery == {"pg-partition": 2.0}
    assert report.recovery_summary() == {"p50": 2.0, "max": 2.0}
    assert report.counts["takeovers"] == 2
    assert report.host_recovery == {"pg-partition": 0.5}
    assert report.host_recovery_summary() == {"p50": 0.5, "max": 0.5}
    assert report.counts["succeeded"] == 2


def test_a_run_that_never_finished_is_not_terminal() -> None:
    history = clean()
    history.outcomes[0] = dataclasses.replace(history.outcomes[0], status="running")
    report = h.check(history)
    assert ("not_terminal", "r1") in kinds(report)


def test_a_missing_run_is_not_terminal() -> None:
    history = clean()
    history.submissions.append(h.Submission("r3", 0.0))
    assert ("not_terminal", "r3") in kinds(h.check(history))


@pytest.mark.parametrize("status", ["failed", "timed_out", "cancelled"])
def test_a_failed_run_is_a_bad_terminal_state(status: str) -> None:
    history = clean()
    history.outcomes[1] = dataclasses.replace(history.outcomes[1], status=status)
    assert ("bad_terminal", "r2") in kinds(h.check(history))


def test_needs_review_is_accepted_only_with_an_effect_in_review() -> None:
    history = clean(("r1",))
    # the run stopped after charge; its non-idempotent effect's outcome is unknown
    history.commits = [c for c in history.commits if c.checkpoint <= 1]
    history.chunks = history.chunks[:1]
    history.target = history.target[:1]
    history.outcomes[0] = dataclasses.replace(history.outcomes[0], status="needs_review")
    history.ledger[0] = dataclasses.replace(history.ledger[0], status="needs_review")
    history.ledger.pop()
    assert h.check(history).violations == []
    history.ledger[0] = dataclasses.replace(history.ledger[0], status="succeeded")
    assert kinds(h.check(history)) == [("bad_terminal", "r1")]


def test_a_non_idempotent_effect_applied_twice_is_found() -> None:
    history = clean()
    history.target.append(h.TargetCall("k-charge-r1", "once", "r1", "charge", True, 3.5))
    found = kinds(h.check(history))
    assert ("effect_applied_twice", "k-charge-r1") in found
    assert ("effect_missing", "r1") in found


def test_a_succeeded_run_whose_effect_never_reached_the_target_is_found() -> None:
    history = clean()
    history.target = [c for c in history.target if c.key != "k-notify-r2"]
    assert kinds(h.check(history)) == [("effect_missing", "r2")]


def test_a_commit_with_a_token_older_than_the_latest_claim_is_stale() -> None:
    history = clean(("r1",))
    # the old holder (token 1) commits after the takeover claim (seq 4, token 2)
    history.commits[2] = dataclasses.replace(history.commits[2], token=1)
    assert ("stale_commit", "r1") in kinds(h.check(history))


def test_a_claim_that_does_not_raise_the_token_is_found() -> None:
    history = clean(("r1",))
    history.claims[1] = dataclasses.replace(history.claims[1], token=1)
    found = kinds(h.check(history))
    assert ("claim_order", "r1") in found


def test_a_commit_before_any_claim_is_stale() -> None:
    history = clean(("r1",))
    history.claims[0] = dataclasses.replace(history.claims[0], seq=7)
    history.claims[1] = dataclasses.replace(history.claims[1], seq=8, token=2)
    assert ("stale_commit", "r1") in kinds(h.check(history))


def test_a_lost_step_completion_is_found() -> None:
    history = clean(("r1",))
    del history.commits[2]  # notify's checkpoint is gone
    found = kinds(h.check(history))
    assert ("lost_step", "r1") in found
    assert ("checkpoint_gap", "r1") in found


def test_a_step_committed_twice_is_found() -> None:
    history = clean(("r1",))
    history.commits.append(h.Commit("r1", 7, 5, "finish", 2, 13.0))
    history.chunks.append(h.Chunk("s-r1", 4, text("finish", "r1")))
    found = kinds(h.check(history))
    assert ("step_twice", "r1") in found
    assert ("lost_step", "r1") in found


def test_a_duplicated_chunk_is_found() -> None:
    history = clean(("r1",))
    history.chunks.append(h.Chunk("s-r1", 4, text("finish", "r1")))
    assert kinds(h.check(history)) == [("chunk_log", "r1")]


def test_a_gap_in_the_chunk_log_is_found() -> None:
    history = clean(("r1",))
    history.chunks[2] = dataclasses.replace(history.chunks[2], seq=7)
    found = kinds(h.check(history))
    assert ("chunk_gap", "r1") in found


def test_a_lost_chunk_is_found() -> None:
    history = clean(("r1",))
    del history.chunks[3]
    assert kinds(h.check(history)) == [("chunk_log", "r1")]


def test_recovery_is_zero_when_another_host_took_over_during_the_fault() -> None:
    history = clean(("r1",))
    history.faults = [h.Fault("blackhole", "w1", 4.0, 30.0, ("r1",))]
    assert h.check(history).recovery == {"blackhole": 0.0}


def test_a_run_that_never_moved_again_is_a_slow_recovery() -> None:
    history = clean(("r1",))
    history.faults = [h.Fault("late", "w2", 20.0, 25.0, ("r1",))]
    history.claims.append(h.Claim("other", 2, 2, "w2", 26.0))  # w2 itself is back
    report = h.check(history)
    assert report.recovery == {"late": float("inf")}
    assert kinds(report) == [("slow_recovery", "late")]


def test_the_recovery_bound_is_the_callers() -> None:
    history = clean(("r1",))
    assert kinds(h.check(history, recovery_bound=1.0)) == [("slow_recovery", "pg-partition")]


def test_a_host_that_never_worked_again_after_the_heal_is_found() -> None:
    history = clean()
    history.claims = [c for c in history.claims if c.run != "other"]
    report = h.check(history)
    assert report.host_recovery == {"pg-partition": float("inf")}
    assert kinds(report) == [("host_not_back", "pg-partition")]


def test_a_host_is_back_with_its_first_commit_after_the_heal() -> None:
    history = clean(("r1",))
    history.faults = [h.Fault("flap", "w2", 9.5, 10.5, ("r1",))]
    history.claims = [c for c in history.claims if c.run != "other"]
    # w2 claimed at 10.0 (before the heal) and committed notify at 11.0
    report = h.check(history, recovery_bound=5.0)
    assert report.host_recovery == {"flap": 0.5}
    assert report.violations == []


def test_hosts_are_told_apart_by_the_callers_function() -> None:
    history = clean(("r1",))
    history.claims = [
        dataclasses.replace(c, worker=f"celery:{c.worker}:1:2", at=c.at - (c.run == "other"))
        for c in history.claims
    ]  # the probe claim at 8.5 now comes before the heal
    history.claims.append(h.Claim("r9", 1, 1, "celery:w1:1:2", 9.25))
    history.host_of = lambda worker: worker.split(":")[1]
    assert h.check(history).host_recovery == {"pg-partition": 0.25}


# --- interrupts and artifacts ------------------------------------------------------------------

APPROVAL = ("prepare", "approve", "finish")


def with_approval(history: h.History | None = None, run: str = "a1") -> h.History:
    """``run`` of an approval workflow: it asks at event 3, the operator approves it (200) and
    asks again with another decision (409), the run is claimed again and commits ``approve``
    1.5 s after the resolution, then ``finish``; ``approve`` wrote one artifact."""
    history = clean() if history is None else history
    history.workflows["net_approval"] = (APPROVAL, ())
    session = f"s-{run}"
    history.submissions.append(h.Submission(run, 0.0, "net_approval"))
    history.claims += [h.Claim(run, 1, 1, "w1", 1.0), h.Claim(run, 5, 2, "w2", 6.0)]
    history.commits += [
        h.Commit(run, 2, 1, "prepare", 1, 2.0),
        h.Commit(run, 6, 2, "approve", 2, 6.5),
        h.Commit(run, 7, 3, "finish", 2, 7.0),
    ]
    history.chunks += [h.Chunk(session, i, text(s, run)) for i, s in enumerate(APPROVAL)]
    history.outcomes.append(h.Outcome(run, "succeeded", session))
    history.resolutions += [
        h.Resolution(f"i-{run}", run, "approve", 200, 5.1, "token:drill", "pg-partition", "during"),
        h.Resolution(f"i-{run}", run, "reject", 409, 5.2, "", "pg-partition", "during"),
    ]
    history.interrupts.append(
        h.InterruptRecord(f"i-{run}", run, "approve", "resolved", "approve", "token:drill", 5.0,
                          (4,))
    )  # fmt: skip
    history.artifacts.append(h.ArtifactRead(run, 2, "d" * 64, True))
    return history


def test_a_clean_history_with_an_interrupt_reports_its_resume_time() -> None:
    report = h.check(with_approval())
    assert report.violations == []
    assert report.resume == {"pg-partition": [1.5]}
    assert report.resume_summary() == {"p50": 1.5, "max": 1.5}
    assert report.counts["interrupts"] == 1
    assert report.counts["resolve_409"] == 1
    assert report.counts["artifacts_read"] == 1


def test_a_second_accepted_resolution_is_a_double_resolution() -> None:
    history = with_approval()
    history.resolutions[1] = dataclasses.replace(history.resolutions[1], status=200)
    assert ("resolved_twice", "i-a1") in kinds(h.check(history))


def test_a_second_resolve_must_be_a_conflict() -> None:
    history = with_approval()
    history.resolutions[1] = dataclasses.replace(history.resolutions[1], status=500)
    assert kinds(h.check(history)) == [("second_resolve", "i-a1")]


def test_a_second_resolved_event_is_a_second_resume() -> None:
    history = with_approval()
    history.interrupts[0] = dataclasses.replace(history.interrupts[0], resolved_events=(4, 8))
    assert kinds(h.check(history)) == [("resumed_twice", "i-a1")]


def test_the_interrupted_step_committed_twice_after_the_decision_is_found() -> None:
    history = with_approval()
    history.commits.append(h.Commit("a1", 8, 4, "approve", 2, 7.5))
    assert ("resumed_twice", "i-a1") in kinds(h.check(history))


def test_an_accepted_resolution_the_database_does_not_hold_is_lost() -> None:
    history = with_approval()
    history.interrupts[0] = dataclasses.replace(
        history.interrupts[0], status="pending", decision="", resolved_events=()
    )
    assert ("lost_resolution", "i-a1") in kinds(h.check(history))


def test_a_resolution_without_its_event_is_lost() -> None:
    history = with_approval()
    history.interrupts[0] = dataclasses.replace(history.interrupts[0], resolved_events=())
    assert ("lost_resolution", "i-a1") in kinds(h.check(history))


def test_a_resolution_the_run_never_resumed_from_is_lost() -> None:
    history = with_approval()
    history.commits = [c for c in history.commits if c.run != "a1" or c.step == "prepare"]
    history.outcomes[-1] = dataclasses.replace(history.outcomes[-1], status="waiting")
    found = kinds(h.check(history))
    assert ("lost_resolution", "i-a1") in found
    assert ("not_terminal", "a1") in found


def test_a_decision_other_than_the_accepted_one_is_found() -> None:
    history = with_approval()
    history.interrupts[0] = dataclasses.replace(history.interrupts[0], decision="reject")
    assert kinds(h.check(history)) == [("decision_changed", "i-a1")]


def test_an_interrupt_left_pending_is_found() -> None:
    history = with_approval()
    history.resolutions = []
    history.interrupts[0] = dataclasses.replace(
        history.interrupts[0], status="pending", decision="", resolved_events=()
    )
    assert ("unresolved_interrupt", "i-a1") in kinds(h.check(history))


def test_the_interrupted_step_committed_before_the_decision_is_found() -> None:
    history = with_approval()
    history.interrupts[0] = dataclasses.replace(history.interrupts[0], resolved_events=(7,))
    assert ("resumed_before_decision", "i-a1") in kinds(h.check(history))


def test_an_unreadable_artifact_is_found() -> None:
    history = with_approval()
    history.artifacts.append(h.ArtifactRead("a1", 3, "e" * 64, False, "NoSuchKey"))
    assert kinds(h.check(history)) == [("artifact_unreadable", "a1@3")]


def test_each_run_is_checked_against_its_own_workflow() -> None:
    history = with_approval()
    # a net_effects run with the approval workflow's steps is a lost step, and the other way
    history.commits = [
        dataclasses.replace(c, step="approve") if (c.run, c.step) == ("r1", "charge") else c
        for c in history.commits
    ]
    assert ("lost_step", "r1") in kinds(h.check(history))
