"""Submit and execute a fan-out run from a plain script while a server uses the same data
directory; print the outcome and which workers claimed the parent and the branch runs.

The script pauses (``argv[1]`` seconds, default 2) before each claim, so every queued run (the
parent, then both branches) sits there for several of the server's worker polls (0.5 s): a
server that claimed library runs would take them in that time."""

import sys
import time

from openrath_project.runtime import LocalRuntime, RunStore
from tests.compat.scripts.fanout_workflow import Fanout

store = RunStore.configured()
runtime = LocalRuntime(store)
runtime.register(Fanout())
run = runtime.submit(Fanout(), state={})
deadline = time.monotonic() + 120
pause = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
while not store.get_run(run.id).terminal and time.monotonic() < deadline:
    time.sleep(pause)
    runtime.work_once(worker_id="script")
final = store.get_run(run.id)
from runs_app.models import Run  # noqa: E402 - a model: only once the library set Django up

print("status:", final.status.value, "state:", dict(final.state))
# scope: the script's own runs (the parent and its branches), read to say who claimed them
runs = Run.objects.unscoped().filter(id=run.id) | Run.objects.unscoped().filter(parent_id=run.id)
claimers = set()
for row in runs:
    for event in store.list_run_events(row.id):
        if event.product_type == "run.claimed":
            claimers.add(event.data["worker"])
print("runs:", runs.count(), "claimed by:", sorted(claimers))
