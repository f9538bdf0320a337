"""The workflow of the network fault drills (``tests/drills/netdrill.py``), run by worker hosts
in network namespaces (``OPENRATH_WORKFLOW_MODULES``).

``net_effects``: four steps, each appending one chunk ``"<step>:<run id>"`` (the history checker
derives the expected chunk log from the committed steps); ``charge`` calls the effect target's
non-idempotent ``/once`` endpoint, ``notify`` its deduplicating ``/upsert`` one, both through
``ctx.effect`` with the ledger's idempotency key. The target's address is the host's gateway
(``OPENRATH_DRILL_TARGET``, set per host by the drill).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from typing import Any

from openrath_project import flow

#: Steps are retried while a dependency is away (a durable timer between attempts).
PATIENT = flow.RetryPolicy(max_attempts=40, base_seconds=0.5, max_seconds=2.0)
STEPS = ("prepare", "charge", "notify", "finish")


def chunk_text(step: str, run_id: object) -> str:
    return f"{step}:{run_id}"


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
