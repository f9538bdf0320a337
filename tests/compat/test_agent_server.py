"""OpenRath 2.0's production wiring: ``LocalRuntime(store, effect_ledger=, production_mode=True)``
works on PostgreSQL, and ``AgentServer`` / the other ``rath.server`` names fail on the import
line with one message that says what to do instead (docs/migrating-from-openrath.md,
"AgentServer and production wiring")."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from openrath_project.compat import OpenRathNameUnsupported
from openrath_project.context import RunContext
from openrath_project.definition import EffectClass, step
from tests.support import require_postgres

#: OpenRath 2.0.0's ``rath.server.__all__``.
RATH_SERVER_NAMES = (
    "AgentServer",
    "AuthProvider",
    "AssistantRecord",
    "FeedbackRecord",
    "InMemoryResourceStore",
    "PostgresResourceStore",
    "ResourceStore",
    "SQLiteResourceStore",
    "SessionRecord",
    "StaticTokenAuth",
    "create_app",
)


@pytest.mark.parametrize("name", RATH_SERVER_NAMES)
def test_every_rath_server_name_fails_on_the_import_line(name):
    with pytest.raises(OpenRathNameUnsupported) as caught:
        exec(f"from openrath_project.server import {name}", {})  # noqa: S102 - the import line
    error = caught.value
    assert isinstance(error, ImportError)
    assert error.openrath_name == name
    assert str(error).startswith(
        f"openrath_project.server.{name} (OpenRath's rath.server.{name}) is not supported: "
    )
    assert "Use instead: " in str(error)
    assert str(error).endswith("See docs/migrating-from-openrath.md.")
    assert "\n" not in str(error)


def test_agent_server_says_what_to_do_instead():
    server = importlib.import_module("openrath_project.server")
    with pytest.raises(OpenRathNameUnsupported) as caught:
        server.AgentServer  # noqa: B018 - the attribute lookup is what fails
    message = str(caught.value)
    for instead in (
        "openrath_project.asgi:application",
        "`openrath-server`",
        "`openrath-worker`",
        "OPENRATH_WORKFLOW_MODULES",
        "`manage.py create_token`",
    ):
        assert instead in message


def test_other_names_stay_plain_attribute_errors():
    server = importlib.import_module("openrath_project.server")
    with pytest.raises(AttributeError) as caught:
        server.NotAnOpenRathName  # noqa: B018
    assert not isinstance(caught.value, ImportError)
    cli = importlib.import_module("openrath_project.server.cli")  # submodules still load
    assert server.cli is cli


def test_a_script_wiring_an_agent_server_stops_at_that_import_with_the_message(tmp_path):
    source = (
        "from openrath_project.runtime import LocalRuntime\n"
        "from openrath_project.server import AgentServer, StaticTokenAuth\n"
        "print('not reached')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", source],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OPENRATH_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "openrath_project.compat.OpenRathNameUnsupported: openrath_project.server.AgentServer "
    )
    assert "OPENRATH_WORKFLOW_MODULES" in last


class TimedProduction:
    """A synchronous step with a timeout: OpenRath's production mode refuses to register it
    (it cannot preempt synchronous code); this product preempts it, so it is accepted."""

    name = "compat.production.timed"

    @step(entry=True, effects=EffectClass.READ_ONLY, timeout_seconds=30)
    def work(self, state, ctx):
        return {**state, "done": True}


def _workflow():
    from openrath_project import flow

    return type("TimedProductionFlow", (TimedProduction, flow.Workflow), {})()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_production_mode_runtime_runs_on_postgresql():
    require_postgres()
    from django.db import connection

    from openrath_project.runtime import (
        LocalRuntime,
        PostgresEffectLedger,
        PostgresRunStore,
        RunStatus,
    )

    db = connection.settings_dict
    dsn = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    store = PostgresRunStore(dsn)
    ledger = PostgresEffectLedger(dsn)
    runtime = LocalRuntime(store, effect_ledger=ledger, production_mode=True)
    assert runtime.production_mode is True
    assert runtime.effect_ledger is ledger

    submitted = runtime.submit(_workflow(), context=RunContext.local(), state={"n": 1})
    done = runtime.work_once(worker_id="production-test")

    assert done is not None
    assert done.id == submitted.id
    assert done.status is RunStatus.SUCCEEDED
    assert dict(done.state) == {"n": 1, "done": True}


def test_production_mode_refuses_sqlite_naming_the_production_commands(tmp_path):
    """In a plain script on the embedded profile (SQLite), whichever database this test run
    uses."""
    source = (
        "from openrath_project.runtime import LocalRuntime, RunStore\n"
        "LocalRuntime(RunStore.configured(), production_mode=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", source],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OPENRATH_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: production_mode=True needs the PostgreSQL store")
    for instead in ("openrath-server", "openrath-worker", "OPENRATH_WORKFLOW_MODULES"):
        assert instead in last
