"""A worker's view of a run's state between steps, so that a step costs what it changed.

Three forms of the state are kept for one claim:

* ``stored``: as the next step's checkpoint will store it (large values as references,
  :mod:`openrath_project.large_values`);
* ``committed``: the stored form at the run's last checkpoint, which the next checkpoint's
  delta is taken from (a step declared ``checkpoint=False`` moves ``stored`` but not this);
* a private snapshot of ``stored`` with the references resolved, read from the artifact store
  once per claim, never handed to a step.

A step is handed an exact copy of the snapshot (:func:`marshal`: C speed, types kept). What it
returns is compared with the snapshot and only what changed is checked
(:func:`state_delta.check_json_change`; its list comparison decides the common "same list, or
grown at the end" case at C speed), and only the changed keys are offloaded. The
new snapshot is the old one with the checked delta applied, so it shares nothing with the step.
"""

from __future__ import annotations

import marshal
import uuid
from dataclasses import dataclass
from typing import Any

from openrath_project import large_values
from runs_app.state_delta import apply, check_json_change

State = dict[str, Any]


@dataclass(frozen=True)
class StateChange:
    """What a step's returned state is, checked: the new snapshot and its stored form."""

    snapshot: State
    stored: State


class StateTrack:
    def __init__(
        self, tenant_id: uuid.UUID | str, stored: State, *, committed: State | None = None
    ) -> None:
        self.tenant_id = tenant_id
        self.stored = stored
        self.committed = stored if committed is None else committed
        self._snapshot: State | None = None

    def _hydrated(self) -> State:
        if self._snapshot is None:
            self._snapshot = large_values.hydrate(self.tenant_id, self.stored)
        return self._snapshot

    def working_copy(self) -> State:
        """A fresh copy of the state with every large value read back, for a step to use (and
        mutate) as it likes."""
        # The bytes are our own, made from the snapshot the line before: nothing untrusted.
        copy: State = marshal.loads(marshal.dumps(self._hydrated()))  # noqa: S302
        return copy

    def change(self, returned: Any, *, where: str) -> StateChange:
        """Check the state a step returned (``StateInvalid`` as for a whole state) and make its
        stored form, looking only at what changed."""
        snapshot = self._hydrated()
        delta = check_json_change(snapshot, returned, where=where)
        new_snapshot = apply(snapshot, delta)
        lists = delta.get("list", {})
        stored = large_values.offload(
            self.tenant_id,
            new_snapshot,
            before=self.stored,
            changed={*delta.get("set", ()), *delta.get("sub", ()), *lists},
            appended={
                key: len(change["append"])
                for key, change in lists.items()
                if change.keys() == {"append"}
            },
        )
        return StateChange(snapshot=new_snapshot, stored=stored)

    def advance(self, change: StateChange, *, committed: bool) -> None:
        """The step's state is the run's now (and its last checkpoint's, if ``committed``)."""
        self.stored, self._snapshot = change.stored, change.snapshot
        if committed:
            self.committed = change.stored

    def checkpointed(self) -> None:
        """A checkpoint stored the current state (a router's decision, which changes none)."""
        self.committed = self.stored
