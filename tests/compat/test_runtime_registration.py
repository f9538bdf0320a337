"""Instance registration (OpenRath registers instances): constructor arguments matter, a class
the runtime cannot build is refused at registration, a construction failure is the run's error."""

from __future__ import annotations

import pytest

from openrath_project import flow
from openrath_project.runtime import LocalRuntime, RunStatus
from openrath_project.runtime.store import RunStore
from runs_app.registry import RegistryError, WorkflowRegistry

pytestmark = pytest.mark.django_db(transaction=True)


class Greeter(flow.Workflow):
    name = "compat.registration.greeter"

    def __init__(self, greeting: str) -> None:
        super().__init__()
        self.greeting = greeting

    @flow.step(entry=True)
    def greet(self, state, ctx):
        return {"text": f"{self.greeting}, {state['who']}"}


def test_a_class_needing_arguments_is_refused_and_nothing_registered():
    registry = WorkflowRegistry()
    with pytest.raises(RegistryError, match="register an instance"):
        registry.register(Greeter)
    assert len(registry) == 0


def test_the_registered_instance_is_what_runs():
    store = RunStore.configured()
    runtime = LocalRuntime(store)
    runtime.register(Greeter("Hello"))
    run = runtime.submit("compat.registration.greeter", state={"who": "Ada"})
    done = runtime.work_once(worker_id="w")
    assert done is not None
    assert done.status is RunStatus.SUCCEEDED
    assert dict(done.state) == {"text": "Hello, Ada"}
    assert done.id == run.id


def test_a_construction_failure_is_the_runs_error():
    class Fragile(flow.Workflow):
        name = "compat.registration.fragile"

        def __init__(self) -> None:
            super().__init__()
            raise RuntimeError("no configuration for Fragile")

        @flow.step(entry=True)
        def only(self, state, ctx):
            return state

    registry = WorkflowRegistry()
    registry.register(Fragile)  # constructible by signature: accepted
    runtime = LocalRuntime(RunStore.configured(), registry=registry)
    run = runtime.submit("compat.registration.fragile")
    failed = runtime.work_once(worker_id="w")

    assert failed is not None
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None
    assert dict(failed.error) == {
        "type": "RuntimeError",
        "message": "no configuration for Fragile",
        "step": "only",
        "attempt": 1,
        "while": "constructing the workflow",
    }
    events = [e.type for e in RunStore.configured().list_run_events(run.id)]
    assert events[-1] == "run.execution.failed"
