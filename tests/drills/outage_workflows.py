"""Workflows of the infrastructure outage drills (``tests/drills/test_outage_drills.py``), run by
the production profile's own processes (``OPENRATH_WORKFLOW_MODULES``).

Each step writes what it does to a log file named in the run's state (one short line per event,
appended with ``O_APPEND``, so lines of concurrent processes never interleave), so executions
can be counted across processes and restarts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from openrath_project import flow

#: Steps are retried while a dependency is away (a durable timer between attempts); the crash
#: budget on top of it (``MAX_CRASH_ATTEMPTS``) covers workers killed in the step.
PATIENT = flow.RetryPolicy(max_attempts=30, base_seconds=0.5, max_seconds=2.0)


def mark(log: str, text: str) -> None:
    """Append ``text`` and this process's id as one line (one ``write``: atomic with O_APPEND)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def _pause(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)


class OutageSteps(flow.Workflow):
    """Five steps, each taking ``step_seconds`` and appending one chunk."""

    name = "outage_steps"

    def _step(self, state: dict[str, Any], ctx: Any, step: str) -> dict[str, Any]:
        mark(state["log"], f"start:{ctx.run_id}:{step}")
        _pause(float(state.get("step_seconds", 0.2)))
        ctx.session.append(f"{step} done", role="assistant")
        mark(state["log"], f"end:{ctx.run_id}:{step}")
        return {**state, "done": [*state.get("done", []), step]}

    @flow.step(entry=True, successors=("s2",), effects="none", retry=PATIENT)
    def s1(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return self._step(state, ctx, "s1")

    @flow.step(successors=("s3",), effects="none", retry=PATIENT)
    def s2(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return self._step(state, ctx, "s2")

    @flow.step(successors=("s4",), effects="none", retry=PATIENT)
    def s3(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return self._step(state, ctx, "s3")

    @flow.step(successors=("s5",), effects="none", retry=PATIENT)
    def s4(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return self._step(state, ctx, "s4")

    @flow.step(effects="none", retry=PATIENT)
    def s5(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return self._step(state, ctx, "s5")


def document(seed: str, size: int) -> dict[str, Any]:
    """A deterministic document of about ``size`` bytes of JSON (the test recomputes it)."""
    lines = []
    block = seed
    while sum(len(line) for line in lines) < size:
        block = hashlib.sha256(block.encode()).hexdigest()
        lines.append(block)
    return {"seed": seed, "lines": lines}


def summary_of(doc: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return {"of": doc["seed"], "digest": digest, "lines": [line[::-1] for line in doc["lines"]]}


class OutageArtifacts(flow.Workflow):
    """Large state values (over ``OPENRATH_STATE_INLINE_BYTES``) live in the artifact store:
    ``write`` stores one, ``derive`` reads it and stores another, ``check`` reads both."""

    name = "outage_artifacts"

    @flow.step(entry=True, successors=("derive",), effects="none", retry=PATIENT)
    def write(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        mark(state["log"], f"start:{ctx.run_id}:write")
        doc = document(state["seed"], int(state.get("size", 4096)))
        _pause(float(state.get("step_seconds", 0.2)))
        ctx.session.append("wrote the document", role="assistant")
        return {**state, "doc": doc}

    @flow.step(successors=("check",), effects="none", retry=PATIENT)
    def derive(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        mark(state["log"], f"start:{ctx.run_id}:derive")
        if state["doc"] != document(state["seed"], int(state.get("size", 4096))):
            raise AssertionError("the document read back differs from the one written")
        _pause(float(state.get("step_seconds", 0.2)))
        ctx.session.append("derived the summary", role="assistant")
        return {**state, "summary": summary_of(state["doc"])}

    @flow.step(effects="none", retry=PATIENT)
    def check(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        mark(state["log"], f"start:{ctx.run_id}:check")
        if state["summary"] != summary_of(state["doc"]):
            raise AssertionError("the summary read back differs from the one written")
        ctx.session.append("checked both", role="assistant")
        return {**state, "checked": True}


def publish_once(
    ledger: str, text: str, seconds: float, idempotency_key: str = ""
) -> dict[str, Any]:
    """The side effect: an "external system" that applies each idempotency key once.

    Every call is logged (``calls.log``); the first call with a key creates ``applied/<key>``
    (``O_EXCL``: exactly one call wins) and later calls with it change nothing and return the
    same receipt. A worker may be killed before or after the apply.
    """
    mark(os.path.join(ledger, "calls.log"), f"call:{idempotency_key}")
    _pause(seconds / 2)
    path = os.path.join(ledger, "applied", idempotency_key)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    else:
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    _pause(seconds / 2)
    return {"receipt": idempotency_key[:16], "text": text}


class OutageEffect(flow.Workflow):
    """``prepare`` appends a chunk, ``publish`` records one idempotent effect through
    ``ctx.effect``, ``confirm`` appends the receipt."""

    name = "outage_effect"

    @flow.step(entry=True, successors=("publish",), effects="none", retry=PATIENT)
    def prepare(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.session.append(f"prepared {state['text']}", role="assistant")
        return state

    @flow.step(successors=("confirm",), effects="idempotent", retry=PATIENT)
    def publish(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        mark(os.path.join(state["ledger"], "steps.log"), f"start:{ctx.run_id}:publish")
        receipt = ctx.effect(
            "publish",
            publish_once,
            state["ledger"],
            state["text"],
            float(state.get("effect_seconds", 0.1)),
            idempotent=True,
        )
        ctx.session.append(f"published {state['text']}", role="assistant")
        return {**state, "receipt": receipt}

    @flow.step(effects="none", retry=PATIENT)
    def confirm(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.session.append(f"confirmed {state['receipt']['receipt']}", role="assistant")
        return state
