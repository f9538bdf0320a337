"""The workflow of the network fault drills (``tests/drills/netdrill.py``), run by worker hosts
in network namespaces (``OPENRATH_WORKFLOW_MODULES``).

``net_effects``: four steps, each appending one chunk ``"<step>:<run id>"`` (the history checker
derives the expected chunk log from the committed steps); ``charge`` calls the effect target's
non-idempotent ``/once`` endpoint, ``notify`` its deduplicating ``/upsert`` one, both through
``ctx.effect`` with the ledger's idempotency key. The target's address is the host's gateway
(``OPENRATH_DRILL_TARGET``, set per host by the drill).

``net_approval``: ``prepare``, ``approve`` (``ctx.interrupt``: the run waits, its lease
released, until the drill's operator resolves it over the API; the step then runs again from its
start, the call returns the decision and the step appends its chunk) and ``finish``.

``net_artifacts``: ``prepare``, ``store`` (puts a document larger than the inline limit,
``OPENRATH_STATE_INLINE_BYTES``, 64 KiB by default, into the state: the executor stores it in the
artifact store, S3 in the production profile, before the checkpoint that references it) and
``finish`` (reads it back, hydrated from S3, and checks it byte for byte).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.request
from typing import Any

from openrath_project import flow

#: Steps are retried while a dependency is away (a durable timer between attempts).
PATIENT = flow.RetryPolicy(max_attempts=40, base_seconds=0.5, max_seconds=2.0)
STEPS = ("prepare", "charge", "notify", "finish")
APPROVAL_STEPS = ("prepare", "approve", "finish")
ARTIFACT_STEPS = ("prepare", "store", "finish")
#: The document ``store`` writes: above the 64 KiB inline limit, so it is always an artifact.
DOCUMENT_BYTES = 96 * 1024


def chunk_text(step: str, run_id: object) -> str:
    return f"{step}:{run_id}"


def document(run_id: object, size: int = DOCUMENT_BYTES) -> str:
    """A document of ``size`` characters that only this run writes (hex of a SHA-256 chain)."""
    parts: list[str] = []
    block = hashlib.sha256(str(run_id).encode()).hexdigest()
    while len(parts) * 64 < size:
        parts.append(block)
        block = hashlib.sha256(block.encode()).hexdigest()
    return "".join(parts)[:size]


def _pause(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)


def call_target(
    kind: str, run_id: str, effect: str, hold: float, idempotency_key: str = ""
) -> dict[str, Any]:
    """POST to the effect target; any failure raises (the ledger records the effect failed)."""
    body = json.dumps({"run": run_id, "effect": effect, "hold": hold}).encode()
    request = urllib.request.Request(  # noqa: S310 - the drill's own gateway address
        f"{os.environ['OPENRATH_DRILL_TARGET']}/{kind}",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return dict(json.loads(response.read()))


class NetEffects(flow.Workflow):
    name = "net_effects"

    def _chunk(self, ctx: Any, step: str) -> None:
        ctx.session.append(chunk_text(step, ctx.run_id), role="assistant")

    @flow.step(entry=True, successors=("charge",), effects="none", retry=PATIENT)
    def prepare(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        _pause(float(state.get("step_seconds", 0.3)))
        self._chunk(ctx, "prepare")
        return state

    @flow.step(
        successors=("notify",), effects="non_idempotent", retry=PATIENT, idempotency_key="charge"
    )
    def charge(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        hold = float(state.get("hold", 0.2))
        receipt = ctx.effect("charge", call_target, "once", str(ctx.run_id), "charge", hold)
        self._chunk(ctx, "charge")
        return {**state, "charged": receipt["receipt"]}

    @flow.step(successors=("finish",), effects="idempotent", retry=PATIENT)
    def notify(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        hold = float(state.get("hold", 0.2))
        receipt = ctx.effect(
            "notify", call_target, "upsert", str(ctx.run_id), "notify", hold, idempotent=True
        )
        self._chunk(ctx, "notify")
        return {**state, "notified": receipt["receipt"]}

    @flow.step(effects="none", retry=PATIENT)
    def finish(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        _pause(float(state.get("step_seconds", 0.3)))
        self._chunk(ctx, "finish")
        return {**state, "finished": True}


class NetApproval(flow.Workflow):
    name = "net_approval"

    @flow.step(entry=True, successors=("approve",), effects="none", retry=PATIENT)
    def prepare(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        _pause(float(state.get("step_seconds", 0.3)))
        ctx.session.append(chunk_text("prepare", ctx.run_id), role="assistant")
        return state

    @flow.step(successors=("finish",), effects="none", retry=PATIENT)
    def approve(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        decision = ctx.interrupt(
            "approval",
            {"run": str(ctx.run_id), "question": "Go on?"},
            schema={"type": "object", "properties": {"note": {"type": "string"}}},
            title="Go on?",
        )
        # only after the decision: the first pass of this step ends in the interrupt call
        _pause(float(state.get("step_seconds", 0.3)))
        ctx.session.append(chunk_text("approve", ctx.run_id), role="assistant")
        return {**state, "decision": decision.decision, "approved_by": decision.resolved_by}

    @flow.step(effects="none", retry=PATIENT)
    def finish(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        _pause(float(state.get("step_seconds", 0.3)))
        ctx.session.append(chunk_text("finish", ctx.run_id), role="assistant")
        return {**state, "finished": True}


class NetArtifacts(flow.Workflow):
    name = "net_artifacts"

    @flow.step(entry=True, successors=("store",), effects="none", retry=PATIENT)
    def prepare(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        _pause(float(state.get("step_seconds", 0.3)))
        ctx.session.append(chunk_text("prepare", ctx.run_id), role="assistant")
        return state

    @flow.step(successors=("finish",), effects="none", retry=PATIENT)
    def store(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        _pause(float(state.get("step_seconds", 0.3)))
        ctx.session.append(chunk_text("store", ctx.run_id), role="assistant")
        return {**state, "doc": document(ctx.run_id)}

    @flow.step(effects="none", retry=PATIENT)
    def finish(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if state.get("doc") != document(ctx.run_id):
            raise AssertionError("the document read back from the artifact store differs")
        _pause(float(state.get("step_seconds", 0.3)))
        ctx.session.append(chunk_text("finish", ctx.run_id), role="assistant")
        return {**state, "finished": True}
