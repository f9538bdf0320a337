"""Workflows the drills run in real worker processes. Each step writes what it does to a file
(one line per event, appended atomically), so executions can be counted across processes.

A drill that must catch a worker in the middle of a step (or an effect) holds it there: the step
waits until the drill creates ``<log>.release``, so no machine is too slow (or too fast) for the
drill to act while it runs. Attempts after the release pass straight through.
"""

from __future__ import annotations

import os
import time

from openrath_project import flow


def mark(state: dict, text: str) -> None:
    with open(state["log"], "a") as handle:
        handle.write(f"{text} {os.getpid()}\n")


#: A held step or effect that is never released gives up after this long (a failing drill's
#: worker process is killed at teardown long before).
HOLD_LIMIT_SECONDS = 600


def release_path(log: str | os.PathLike[str]) -> str:
    return f"{os.fspath(log)}.release"


def release(log: str | os.PathLike[str]) -> None:
    """Let the held steps and effects of the runs logging to ``log`` go on."""
    open(release_path(log), "w").close()  # noqa: SIM115


def _hold(log: str) -> None:
    deadline = time.monotonic() + HOLD_LIMIT_SECONDS
    while not os.path.exists(release_path(log)) and time.monotonic() < deadline:
        time.sleep(0.05)


def _work(state: dict, step: str) -> None:
    if state.get("hold_step") == step:
        _hold(state["log"])
    if state.get("slow_step") == step:
        deadline = time.monotonic() + float(state.get("slow_seconds", 10))
        while time.monotonic() < deadline:
            time.sleep(0.05)


class DrillSteps(flow.Workflow):
    name = "drill_steps"

    def _step(self, state, ctx, name):
        mark(state, f"start:{name}")
        _work(state, name)
        ctx.session.append(f"{name} done", role="assistant")
        mark(state, f"end:{name}")
        return {**state, "done": [*state.get("done", []), name]}

    @flow.step(entry=True, successors=("s2",), effects="none")
    def s1(self, state, ctx):
        return self._step(state, ctx, "s1")

    @flow.step(successors=("s3",), effects="none")
    def s2(self, state, ctx):
        return self._step(state, ctx, "s2")

    @flow.step(
        successors=("s4",),
        effects="idempotent",
        retry=flow.RetryPolicy(max_attempts=2, base_seconds=0.5, max_seconds=0.5),
    )
    def s3(self, state, ctx):
        if state.get("fail_once") and not os.path.exists(state["log"] + ".failed"):
            open(state["log"] + ".failed", "w").close()  # noqa: SIM115
            mark(state, "fail:s3")
            raise ConnectionError("transient failure, retried after a durable timer")
        return self._step(state, ctx, "s3")

    @flow.step(successors=("s5",), effects="none")
    def s4(self, state, ctx):
        return self._step(state, ctx, "s4")

    @flow.step(effects="none")
    def s5(self, state, ctx):
        return self._step(state, ctx, "s5")


def slow_publish(
    log: str, text: str, seconds: float, hold: bool = False, idempotency_key: str = ""
) -> dict:
    """The effect: record that it happened, then take a while or (``hold``) wait for the
    release (a worker can die meanwhile)."""
    with open(log, "a") as handle:
        handle.write(f"effect:{text} {idempotency_key[:12]} {os.getpid()}\n")
    if hold:
        _hold(log)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return {"published": text}


class DrillEffect(flow.Workflow):
    name = "drill_effect"

    @flow.step(entry=True, effects="non_idempotent")
    def publish(self, state, ctx):
        mark(state, "start:publish")
        receipt = ctx.effect(
            "publish",
            slow_publish,
            state["log"],
            state["text"],
            float(state.get("effect_seconds", 0)),
            bool(state.get("hold_effect", False)),
            idempotent=state.get("idempotent", False),
        )
        mark(state, "end:publish")
        return {**state, "receipt": receipt}


class Stubborn(flow.Workflow):
    """A step that swallows the soft stop: only the hard backstop ends it (its own end, after
    ``HOLD_LIMIT_SECONDS``, is far beyond any drill's wait)."""

    name = "drill_stubborn"

    @flow.step(entry=True, effects="none", timeout_seconds=1)
    def spin(self, state, ctx):
        mark(state, "start:spin")
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        while time.monotonic() < deadline:
            try:
                while time.monotonic() < deadline:
                    pass
            except BaseException:  # noqa: S112 - swallowing the soft timeout on purpose
                continue
        return state
